// The defects issue 38 lists, one named test each, against the real local runtime with the
// shipped modules (public/) and the real `ai` 7.x. Each fails without its fix:
//   * credentials given as a function are resolved for the /ui reads and the cancel;
//   * the transport's read loop honours backpressure (it reads the network only as fast as it is read);
//   * an upstream `error` chunk followed by the stream's `error` end reaches onError once;
//   * giveUpAfterMs outlasts LEASE_MS, so a reader shows the server's "only part was saved" ending;
//   * an EventSource that does not close at [DONE] gets the ending once (id: done, then 204);
//   * producer.js's flush answers, and is typed as, {seq, durableSeq} (tsc: tests/ai/types/usage.ts);
//   * client.js ends with the row's error read from /text;
//   * the transport warns once when the SDK that resumes does not read resumeStreamIsReplay.
import test from 'node:test';
import assert from 'node:assert/strict';
import { EventSource } from 'eventsource';
import { Chat } from '@ai-sdk/react';
import { readUIMessageStream } from 'ai';
import { startStack } from '../e2e/harness.mjs';
import { api, call, insertRow, ndjson, newStream, ok, rows, uniqueId, until } from '../e2e/util.mjs';
import { openStream, signStreamToken } from '../../public/producer.js';
import { RindleChatTransport, readUIStream } from '../../public/chat-transport.js';
import { followStream } from '../../public/client.js';
import { streamAnswer, uiStreamOptions } from '../../examples/chat/answer.js';

let stack;
test.before(async () => {
  stack = await startStack({ name: 'ai-transport-defects', vars: { LINGER_MS: '500' } });
});
test.after(() => stack?.stop());

const token = (claims) => signStreamToken({ secret: stack.secret, ...claims });
const openUi = async (id) => openStream({ baseUrl: stack.baseUrl, streamId: id, token: await token({ stream: id, scope: 'write' }), format: 'ui' });
async function drain(stream) {
  const out = [];
  for await (const value of stream) out.push(value);
  return out;
}
const retired = (id) =>
  until(async () => (await call(`${stack.baseUrl}/streams/${id}/stats`, { headers: { authorization: `Bearer ${stack.token(id)}` } })).status === 404, `${id} to retire`, 20_000);

test('defect: credentials given as a function are resolved for the /ui reads and the cancel, not only for the app\'s endpoint', async () => {
  const id = newStream(stack, 'creds');
  const stream = await openUi(id);
  await stream.append([{ type: 'start' }, { type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: 'hi 👋🏽' }]);
  const readToken = await token({ stream: id, scope: 'read cancel' });
  const seen = [];
  const transport = new RindleChatTransport({
    api: 'app:/api/chat',
    streamsUrl: stack.baseUrl,
    credentials: () => 'omit',
    fetch: async (url, init = {}) => {
      seen.push({ path: String(url).replace(stack.baseUrl, '').split('?')[0], credentials: init.credentials });
      if (String(url).startsWith('app:')) return Response.json({ streamId: id, token: readToken });
      return fetch(url, init); // Node's fetch refuses a credentials value that is not a string
    },
  });
  const abort = new AbortController();
  const chunks = await transport.sendMessages({ chatId: 'c', messages: [], trigger: 'submit-message', messageId: undefined, abortSignal: abort.signal });
  const reader = chunks.getReader();
  assert.deepEqual((await reader.read()).value, { type: 'start', messageId: id });
  abort.abort(); // stop(): the transport cancels the answer
  await until(() => seen.some((s) => s.path.endsWith('/cancel')), 'the cancel');
  await until(() => rows(stack, id).row.cancel === 1, 'the cancel to reach the row');
  for (const s of seen) assert.equal(s.credentials, 'omit', `${s.path}: ${typeof s.credentials}`);
  assert.deepEqual(new Set(seen.map((s) => s.path.split('/').pop())), new Set(['chat', 'ui', 'cancel']));
  await stream.close();
});

test('defect: the transport\'s read loop honours backpressure: a consumer that stops reading stops the network reads', async () => {
  // The real /ui body of a long answer, captured from the Worker, is handed to the reader one SSE
  // event per pull of its body (a body that counts the reader's pulls; the only stand-in here).
  const id = newStream(stack, 'bp');
  const stream = await openUi(id);
  const produced = await drain(streamAnswer({ seed: 7, kind: 'full', words: 400 }).toUIMessageStream(uiStreamOptions(id)));
  assert.equal((await stream.pipe(new ReadableStream({ start(c) { produced.forEach((x) => c.enqueue(x)); c.close(); } }))).status, 'complete');
  const body = (await call(`${stack.baseUrl}/streams/${id}/ui?token=${await token({ stream: id, scope: 'read' })}`)).raw;
  const events = body.split(/(?<=\n\n)/);
  assert.ok(events.length > 300, `${events.length} events`);
  let pulls = 0;
  const encoder = new TextEncoder();
  const fetchCounting = async () =>
    new Response(new ReadableStream({ pull(c) { if (pulls < events.length) c.enqueue(encoder.encode(events[pulls++])); else c.close(); } }, { highWaterMark: 0 }), {
      headers: { 'content-type': 'text/event-stream' },
    });
  const reader = readUIStream({ streamId: id, token: 't', fetch: fetchCounting }).getReader();
  assert.deepEqual((await reader.read()).value, produced[0]);
  // Let the reader run as far as it will: no I/O is pending, only the reader's own tasks.
  let before = -1;
  while (before !== pulls) {
    before = pulls;
    for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
  }
  assert.ok(pulls <= 8, `the reader pulled ${pulls} of ${events.length} events while its consumer read 1 chunk`);
  const rest = [];
  for (let next = await reader.read(); !next.done; next = await reader.read()) rest.push(next.value);
  assert.deepEqual([produced[0], ...rest], produced, 'reading on gets everything, once');
});

test('defect: an upstream `error` chunk followed by the stream\'s error end reaches onError once', async () => {
  const id = newStream(stack, 'err-once');
  const stream = await openUi(id);
  const produced = [{ type: 'start', messageId: id }, { type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: 'partial' }, { type: 'error', errorText: 'the model is overloaded' }];
  const end = await stream.pipe(new ReadableStream({ start(c) { produced.forEach((x) => c.enqueue(x)); c.close(); } }));
  assert.equal(end.status, 'error');
  assert.equal(rows(stack, id).row.error, 'the model is overloaded', 'the stream failed with the chunk\'s text');
  const readToken = await token({ stream: id, scope: 'read cancel' });
  // What the transport hands the SDK: the producer's lines and nothing added.
  const chunks = await drain(readUIStream({ streamId: id, token: readToken, streamsUrl: stack.baseUrl }));
  assert.deepEqual(chunks, produced);
  const errors = [];
  for await (const _ of readUIMessageStream({ stream: readUIStream({ streamId: id, token: readToken, streamsUrl: stack.baseUrl }), onError: (e) => errors.push(e.message) }));
  assert.deepEqual(errors, ['the model is overloaded'], 'readUIMessageStream: onError once');
  // useChat's own Chat, resuming it.
  const onError = [];
  const chat = new Chat({
    id: 'c-err',
    transport: new RindleChatTransport({ streamsUrl: stack.baseUrl, fetch: async (url, init) => (String(url).startsWith('app:') ? Response.json({ streamId: id, token: readToken }) : fetch(url, init)), prepareReconnectToStreamRequest: () => ({ api: 'app:/stream' }) }),
    onError: (e) => onError.push(e.message),
  });
  await chat.resumeStream();
  assert.deepEqual(onError, ['the model is overloaded'], 'Chat onError once');
  assert.equal(chat.status, 'error');
});

test('defect: an EventSource that does not close at [DONE] gets the ending once: id: done, then 204 stops it', async () => {
  const id = newStream(stack, 'es-done');
  const stream = await openUi(id);
  await stream.append([{ type: 'start' }, { type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: 'hé 👋🏽' }, { type: 'text-end', id: 't' }]);
  await stream.close();
  for (const where of ['lingering', 'from D1']) {
    if (where === 'from D1') await retired(id);
    const es = new EventSource(`${stack.baseUrl}/streams/${id}/ui?token=${await token({ stream: id, scope: 'read' })}`);
    const got = [];
    const closed = new Promise((resolve) => {
      es.addEventListener('message', (e) => {
        got.push({ id: e.lastEventId, data: e.data });
        // Without id: done a reconnect gets the ending again: a second [DONE] ends the test too.
        if (got.filter((g) => g.data === '[DONE]').length > 1) resolve('again');
      });
      es.addEventListener('error', () => es.readyState === EventSource.CLOSED && resolve('closed'));
    });
    const how = await closed;
    es.close();
    assert.equal(how, 'closed', `${where}: the EventSource stopped (204) instead of reconnecting for the ending again`);
    const tail = got.slice(-2);
    assert.deepEqual(tail.map((e) => e.data), ['{"type":"finish"}', '[DONE]'], `${where}: the ending, then [DONE]`);
    assert.equal(tail[0].id, 'done', `${where}: the ending carries id: done`);
    assert.equal(got.filter((g) => g.data === '[DONE]').length, 1, `${where}: [DONE] once`);
    assert.equal(got.filter((g) => g.data.includes('"finish"')).length, 1, `${where}: the ending once`);
  }
  const again = await call(`${stack.baseUrl}/streams/${id}/ui?token=${await token({ stream: id, scope: 'read' })}`, { headers: { 'last-event-id': 'done' } });
  assert.equal(again.status, 204);
});

test('defect: producer.js flush answers {seq, durableSeq} (no `cancelled`, as producer.d.ts now says)', async () => {
  const id = newStream(stack, 'flush');
  const stream = await openUi(id);
  await stream.append({ type: 'start' });
  const flushed = await stream.flush();
  assert.deepEqual(Object.keys(flushed).sort(), ['durableSeq', 'seq']);
  assert.equal(flushed.durableSeq, flushed.seq);
  await stream.close();
});

test('defect: client.js ends with the row\'s error, read from /text (which now sends it)', async () => {
  const id = insertRow(stack, uniqueId('text-err'));
  const c = api(stack, id);
  ok(await c.open(), 'open');
  ok(await c.append('some text 🦀'), 'append');
  ok(await c.fail('the upstream went away'), 'fail');
  await retired(id); // the reader then finds no live stream (absent) and reads /text
  assert.equal(ok(await c.text(), '/text').error, 'the upstream went away');
  const ended = await new Promise((resolve, reject) => {
    followStream({ streamId: id, token: c.readToken, baseUrl: stack.baseUrl, EventSourceImpl: EventSource, onEnd: resolve, onError: reject });
  });
  assert.deepEqual(ended, { status: 'error', seq: 'some text 🦀'.length, error: 'the upstream went away', text: 'some text 🦀' });
});

test('the transport warns once when the SDK that resumes does not read resumeStreamIsReplay (an ai older than 7.0.137)', async () => {
  const id = newStream(stack, 'warn');
  const stream = await openUi(id);
  await stream.append([{ type: 'start' }]);
  await stream.close();
  const readToken = await token({ stream: id, scope: 'read' });
  const transport = new RindleChatTransport({ streamsUrl: stack.baseUrl, fetch: async (url, init) => (String(url).startsWith('app:') ? Response.json({ streamId: id, token: readToken }) : fetch(url, init)), prepareReconnectToStreamRequest: () => ({ api: 'app:/stream' }) });
  const warnings = [];
  const warn = console.warn;
  console.warn = (...args) => warnings.push(args.join(' '));
  try {
    // An old SDK: it reads the stream without reading transport.resumeStreamIsReplay.
    for (let i = 0; i < 2; i++) await drain(await transport.reconnectToStream({ chatId: 'c' }));
  } finally {
    console.warn = warn;
  }
  assert.equal(warnings.length, 1, `warned once: ${JSON.stringify(warnings)}`);
  assert.match(warnings[0], /resumeStreamIsReplay.*ai >= 7\.0\.137/);
});

test('defect: giveUpAfterMs outlasts LEASE_MS: after a kill, the reader ends with the server\'s "only part was saved", not "gave up"', { timeout: 180_000 }, async (t) => {
  // LEASE_MS 30 s: the lease seals the lost stream 15-30 s after the kill. The old default
  // give-up (10 s) always came first; the default now follows the server's x-rindle-lease-ms.
  const lease = await startStack({
    name: 'ai-giveup-lease',
    vars: { LEASE_MS: '30000', CHECKPOINT_INTERVAL_MS: '600000', UI_CHECKPOINT_CHARS: '1048576', SSE_RETRY_MS: '200', RESUME_WINDOW_MS: '0' },
  });
  t.after(() => lease.stop());
  const id = newStream(lease, 'giveup');
  const write = api(lease, id);
  ok(await write.open(undefined, 'ui'), 'open');
  const shown = ndjson([{ type: 'start', messageId: id }, { type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: 'shown, never saved' }]);
  ok(await write.append(shown), 'append (nothing checkpointed: the interval is 10 minutes)');
  const reader = readUIStream({ streamId: id, token: lease.token(id, 'read'), streamsUrl: lease.baseUrl }).getReader();
  for (let i = 0; i < 3; i++) await reader.read(); // every line shown
  await lease.kill();
  await lease.restart();
  const last = (await reader.read()).value;
  assert.equal(last.type, 'error');
  assert.match(last.errorText, /^only part of the answer shown was saved \(0 of \d+ UTF-16 units\): the stream ended interrupted/, last.errorText);
  assert.equal((await reader.read()).done, true);
});
