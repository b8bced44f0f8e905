// The stock AI SDK transport resumes from rindle (issue 38, SPEC §9), with the real `ai` 7.x
// (DefaultChatTransport, readUIMessageStream, uiMessageChunkSchema) and the real
// `@ai-sdk/react` Chat class, in Node, against the real local runtime.
//
// The resume GET, `GET /streams/{id}/stream` or `GET /streams/chats/{chat}/stream` (a token with
// a `chat` claim, the chat column mapped): 204 (the SDK's "nothing to resume") when no answer is
// active; otherwise the /ui SSE from offset 0, a full replay, because the stock SDK ignores
// `id:`. With the SDK's resumeStreamIsReplay (true by default) a Chat that already shows part of
// the answer ends with the answer once, equal to the source. A reader that comes between the
// row's insert and the open waits for the open. A chat token reads only its chat's answers.
//
// The producer is the test (producer.js over Node's fetch): it holds the answer mid-way until the
// test has resumed, then sends the rest; nothing waits on the clock. Seeded (E2E_SEED replays).
import test from 'node:test';
import assert from 'node:assert/strict';
import { DefaultChatTransport, readUIMessageStream } from 'ai';
import { Chat } from '@ai-sdk/react';
import { startStack } from '../e2e/harness.mjs';
import { rawRequest, seedFromEnv, uiMessageOf, uniqueId, until } from '../e2e/util.mjs';
import { openStream, signStreamToken } from '../../public/producer.js';
import { RindleChatTransport } from '../../public/chat-transport.js';
import { streamAnswer, uiStreamOptions } from '../../examples/chat/answer.js';

const SEED = seedFromEnv();
const LINGER_MS = 1500;
let stack;

test.before(async () => {
  stack = await startStack({ name: 'ai-stock-transport', vars: { LINGER_MS: String(LINGER_MS) } });
});
test.after(() => stack?.stop());

async function drain(stream) {
  const out = [];
  for await (const value of stream) out.push(value);
  return out;
}

/** An assistant row of `chat` (SPEC §5: the app inserts it before the open). */
function insertAnswer(chat) {
  const id = uniqueId('a');
  stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES (?, ?, 'assistant')`, id, chat);
  return id;
}

const token = (claims) => signStreamToken({ secret: stack.secret, ...claims });

/**
 * The scripted answer's chunks, produced into `id`'s stream by the producer helpers: `sendUpTo(n)`
 * sends the first n chunks, `finish()` the rest and closes. Resolves once the stream is open.
 */
async function producer(id, { seed = SEED, open = true } = {}) {
  const chunks = await drain(streamAnswer({ seed, kind: 'full' }).toUIMessageStream(uiStreamOptions(id)));
  let controller;
  const source = new ReadableStream({ start: (c) => void (controller = c) });
  let sent = 0;
  const start = async () => {
    const stream = await openStream({ baseUrl: stack.baseUrl, streamId: id, token: await token({ stream: id, scope: 'write' }), format: 'ui' });
    return stream.pipe(source);
  };
  const p = {
    chunks,
    ended: undefined,
    start() {
      p.ended = start();
      return p;
    },
    sendUpTo(n) {
      for (; sent < n; sent++) controller.enqueue(chunks[sent]);
    },
    async finish() {
      p.sendUpTo(chunks.length);
      controller.close();
      return p.ended;
    },
  };
  if (open) {
    p.start();
    // The open is done once a read of /text answers `streaming`.
    await until(() => stack.db.get('SELECT status FROM messages WHERE id = ?', id)?.status === 'streaming', `${id} to open`);
  }
  return p;
}

/** The stock transport, its resume GET pointed at `url` (and `headers`). */
const stock = (url, headers) => new DefaultChatTransport({ prepareReconnectToStreamRequest: () => ({ api: url, headers }) });
const byId = async (id) => `${stack.baseUrl}/streams/${id}/stream?token=${await token({ stream: id, scope: 'read' })}`;
const byChat = async (chat, claims = { chat }) => `${stack.baseUrl}/streams/chats/${chat}/stream?token=${await token({ ...claims, scope: 'read' })}`;

/** Wait until the server holds `n` chunks of `id` (its /ui lines), read from D1 or live via flush. */
const source = async (chunks) => (await uiMessageOf(chunks)).message;

test('stock transport, resume GET by stream id, mid-answer: a full replay the SDK validates, equal to the source', async (t) => {
  t.diagnostic(`seed ${SEED}`);
  const id = insertAnswer('c-by-id');
  const p = await producer(id);
  p.sendUpTo(Math.floor(p.chunks.length / 2));
  const resumed = await stock(await byId(id)).reconnectToStream({ chatId: 'c-by-id' });
  assert.ok(resumed, 'an answer in flight is resumed, not 204');
  const reading = drain(resumed);
  assert.equal((await p.finish()).status, 'complete');
  const got = await reading;
  assert.deepEqual(got, p.chunks, 'every chunk from offset 0, once, then nothing added (the producer sent its own finish)');
  assert.deepEqual((await uiMessageOf(got)).message, await source(p.chunks));
});

test('stock transport, resume GET for a chat (chat token, Authorization header or ?token=): the chat\'s answer in flight, replayed whole', async () => {
  const chat = uniqueId('chat');
  const id = insertAnswer(chat);
  const p = await producer(id, { seed: SEED + 1 });
  p.sendUpTo(5);
  const viaQuery = drain(await stock(await byChat(chat)).reconnectToStream({ chatId: chat }));
  const header = { authorization: `Bearer ${await token({ chat, scope: 'read' })}` };
  const viaHeader = drain(await stock(`${stack.baseUrl}/streams/chats/${chat}/stream`, header).reconnectToStream({ chatId: chat }));
  await p.finish();
  assert.deepEqual(await viaQuery, p.chunks);
  assert.deepEqual(await viaHeader, p.chunks);
  // A token for every stream (`stream: "*"`) reads every chat too.
  const any = insertAnswer(chat);
  const q = await producer(any, { seed: SEED + 2 });
  const viaAny = drain(await stock(await byChat(chat, { stream: '*' })).reconnectToStream({ chatId: chat }));
  await q.finish();
  assert.deepEqual(await viaAny, q.chunks);
});

test('the resume GET answers 204 ("nothing to resume") when no answer is active: none in the chat, no row, never opened, ended and gone', async () => {
  const chat = uniqueId('chat-idle');
  assert.equal(await stock(await byChat(chat)).reconnectToStream({ chatId: chat }), null, 'a chat with no answer');
  assert.equal(await stock(await byId(uniqueId('nobody'))).reconnectToStream({ chatId: chat }), null, 'no row');
  // A finished answer: replayed with its ending while it lingers (a page that learned of it while
  // it ran does not miss it), then 204.
  const id = insertAnswer(chat);
  const p = await producer(id, { seed: SEED + 3 });
  await p.finish();
  assert.equal(await stock(await byChat(chat)).reconnectToStream({ chatId: chat }), null, 'the chat has no answer streaming');
  const lingering = await stock(await byId(id)).reconnectToStream({ chatId: chat });
  if (lingering) assert.deepEqual(await drain(lingering), p.chunks, 'a lingering answer replays whole');
  await until(async () => (await rawRequest(stack.baseUrl, { path: `/streams/${id}/stats`, headers: { authorization: `Bearer ${stack.token(id)}` } })).status === 404, 'the stream to retire', 20_000);
  assert.equal(await stock(await byId(id)).reconnectToStream({ chatId: chat }), null, 'ended and retired: 204');
  // A text stream is no answer of the AI SDK: 409, which the SDK reports.
  const text = insertAnswer(chat);
  await openStream({ baseUrl: stack.baseUrl, streamId: text, token: await token({ stream: text, scope: 'write' }) });
  await assert.rejects(stock(await byId(text)).reconnectToStream({ chatId: chat }), /wrong_format|409/);
});

test('a resume GET that comes between the insert and the open waits for the open, then replays the answer', async () => {
  const chat = uniqueId('chat-pending');
  const id = insertAnswer(chat);
  const p = await producer(id, { seed: SEED + 4, open: false });
  const waiting = stack.waitForLog(new RegExp(`reader_awaits_open.*${id}|${id}.*reader_awaits_open`), 20_000);
  const resuming = stock(await byId(id)).reconnectToStream({ chatId: chat });
  await waiting; // the object holds the request until the stream opens here
  p.start();
  const resumed = await resuming;
  assert.ok(resumed, 'the answer, not 204');
  const reading = drain(resumed);
  await p.finish();
  assert.deepEqual(await reading, p.chunks);
});

test('a chat token reads only its chat\'s answers: another chat\'s lookup and a forged ?chat= are the same 403', async () => {
  const [mine, theirs] = [uniqueId('chat-mine'), uniqueId('chat-theirs')];
  const other = insertAnswer(theirs);
  const p = await producer(other, { seed: SEED + 5 });
  const mineToken = await token({ chat: mine, scope: 'read' });
  const denied = await rawRequest(stack.baseUrl, { path: `/streams/${uniqueId('x')}/text` });
  for (const path of [
    `/streams/chats/${theirs}/stream?token=${mineToken}`,
    `/streams/${other}/ui?chat=${mine}&token=${mineToken}`,
    `/streams/${other}/stream?chat=${mine}&token=${mineToken}`,
    `/streams/${other}/ui?token=${mineToken}`,
  ]) {
    const res = await rawRequest(stack.baseUrl, { path });
    assert.equal(res.status, 403, `${path}: ${res.status} ${res.raw}`);
    assert.equal(res.raw, denied.raw, 'the same denial as every other');
  }
  const writeWithChat = await rawRequest(stack.baseUrl, { method: 'POST', path: `/streams/${other}/cancel?chat=${theirs}`, headers: { authorization: `Bearer ${await token({ chat: theirs, scope: 'read cancel' })}` } });
  assert.equal(writeWithChat.status, 403, 'a chat claim reads; it never cancels');
  await p.finish();
});

test('resumeStreamIsReplay: a Chat (@ai-sdk/react) that shows part of the answer resumes it with the stock transport and with RindleChatTransport, and ends with it once', async () => {
  for (const kind of ['stock', 'rindle']) {
    const chat = uniqueId(`chat-replay-${kind}`);
    const id = insertAnswer(chat);
    const p = await producer(id, { seed: SEED + 6 });
    const half = Math.floor(p.chunks.length / 2);
    p.sendUpTo(half);
    // The page already shows the first half (what it rendered before a network blip).
    const partial = (await uiMessageOf(p.chunks.slice(0, half))).message;
    const question = { id: `q-${id}`, role: 'user', parts: [{ type: 'text', text: 'Weather?' }] };
    const readToken = await token({ stream: id, scope: 'read cancel' });
    const transport = kind === 'stock'
      ? stock(await byId(id))
      : new RindleChatTransport({ streamsUrl: stack.baseUrl, fetch: async (url, init) => (String(url).startsWith('app:') ? Response.json({ streamId: id, token: readToken }) : fetch(url, init)), prepareReconnectToStreamRequest: () => ({ api: 'app:/stream' }) });
    const warnings = [];
    const warn = console.warn;
    console.warn = (...args) => warnings.push(args.join(' '));
    const c = new Chat({ id: chat, messages: [question, partial], transport });
    try {
      const resumed = c.resumeStream();
      await until(() => c.status === 'streaming', `${kind}: the chat to stream the replay`);
      await p.finish();
      await resumed;
    } finally {
      console.warn = warn;
    }
    assert.equal(c.status, 'ready', `${kind}: not streaming at the end`);
    assert.deepEqual(c.messages.map((m) => [m.role, m.id]), [['user', question.id], ['assistant', id]], `${kind}: one answer, replaced by its id`);
    assert.deepEqual(c.messages[1].parts, (await source(p.chunks)).parts, `${kind}: the answer equals the source, no part twice`);
    assert.deepEqual(warnings.filter((w) => w.includes('resumeStreamIsReplay')), [], `${kind}: this ai reads resumeStreamIsReplay: no warning`);
  }
});

test('readUIMessageStream over the stock resume of a finished, lingering answer equals the source (the SDK\'s own chunk schema accepts every line)', async () => {
  const chat = uniqueId('chat-msg');
  const id = insertAnswer(chat);
  const p = await producer(id, { seed: SEED + 7 });
  await p.finish();
  const resumed = await stock(await byId(id)).reconnectToStream({ chatId: chat });
  assert.ok(resumed, 'within the linger window the ended answer is still active here');
  let message;
  for await (const m of readUIMessageStream({ stream: resumed })) message = m;
  assert.deepEqual(message, await source(p.chunks));
});
