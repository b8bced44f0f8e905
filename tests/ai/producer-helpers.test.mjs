// The producer helpers of issue 38 with the real `ai` 7.x against the real local runtime:
//   * ids by construction: a `ui` stream's start chunk gets messageId = the stream id when it has
//     none, and one with another id is refused (BadChunkError, the stream failed, nothing of it
//     written);
//   * consumeSseStream: a route handler that answers the browser with toUIMessageStreamResponse
//     writes the same chunks through rindle (the way resumable-stream plugs in);
//   * readUIMessage (producer.js and chat-transport.js): an answer as a UIMessage from its text,
//     from its row (body + chunk rows, offset-aware) and from /text, equal to what the SDK builds
//     from the producer's own chunks; a partial answer gives the parts so far.
import test from 'node:test';
import assert from 'node:assert/strict';
import { readUIMessageStream } from 'ai';
import { startStack } from '../e2e/harness.mjs';
import { newStream, rows, uiChunksOf, uiMessageOf } from '../e2e/util.mjs';
import { BadChunkError, openStream, readUIMessage, signStreamToken } from '../../public/producer.js';
import { readUIMessage as readUIMessageOfTheTransport, createSseParser } from '../../public/chat-transport.js';
import { streamAnswer, uiStreamOptions } from '../../examples/chat/answer.js';

let stack;
test.before(async () => {
  stack = await startStack({ name: 'ai-producer-helpers' });
});
test.after(() => stack?.stop());

const token = (stream, scope) => signStreamToken({ secret: stack.secret, stream, scope });
const openUi = async (id) => openStream({ baseUrl: stack.baseUrl, streamId: id, token: await token(id, 'write'), format: 'ui' });
const fromArray = (items) => new ReadableStream({ start(c) { items.forEach((x) => c.enqueue(x)); c.close(); } });
async function drain(stream) {
  const out = [];
  for await (const value of stream) out.push(value);
  return out;
}
const storedChunks = (id) => uiChunksOf(rows(stack, id).row.body);

test('ids by construction: a start chunk without messageId gets the stream id (append and pipe); another id is refused and nothing of it is written', async () => {
  const a = newStream(stack, 'ids-append');
  const s = await openUi(a);
  await s.append([{ type: 'start' }, { type: 'text-start', id: 't' }]);
  await s.close();
  assert.deepEqual(storedChunks(a)[0], { type: 'start', messageId: a });

  // toUIMessageStream without generateMessageId sends a start chunk with no messageId.
  const b = newStream(stack, 'ids-pipe');
  const produced = await drain(streamAnswer({ seed: 11, kind: 'text' }).toUIMessageStream());
  assert.equal(produced[0].messageId, undefined, 'the SDK sent no id');
  assert.equal((await (await openUi(b)).pipe(fromArray(produced))).status, 'complete');
  assert.deepEqual(storedChunks(b), [{ ...produced[0], messageId: b }, ...produced.slice(1)]);

  const c = newStream(stack, 'ids-other');
  const other = await drain(streamAnswer({ seed: 12, kind: 'text' }).toUIMessageStream({ generateMessageId: () => 'not-the-row' }));
  const stream = await openUi(c);
  await assert.rejects(stream.pipe(fromArray(other)), (e) => e instanceof BadChunkError && /not-the-row/.test(e.message) && e.message.includes(c));
  const { row } = rows(stack, c);
  assert.equal(row.status, 'error', 'the stream is failed, never left streaming');
  assert.equal(storedChunks(c).length, 0, 'nothing of the refused start written');
  assert.throws(() => stream.append({ type: 'start', messageId: 'x' }), BadChunkError, 'append refuses it too');
});

test('consumeSseStream: a route handler answering with toUIMessageStreamResponse writes the same chunks through rindle', async () => {
  const id = newStream(stack, 'sse');
  const stream = await openUi(id);
  let consumed;
  const result = streamAnswer({ seed: 13, kind: 'full', abortSignal: stream.signal });
  const response = result.toUIMessageStreamResponse({ ...uiStreamOptions(id), consumeSseStream: (sse) => void (consumed = stream.consumeSseStream(sse)) });
  // What the browser gets.
  const browser = [];
  const parser = createSseParser(({ data }) => data && data !== '[DONE]' && browser.push(JSON.parse(data)));
  for await (const piece of response.body.pipeThrough(new TextDecoderStream())) parser.push(piece);
  assert.equal((await consumed).status, 'complete');
  assert.equal(browser[0].messageId, id);
  assert.deepEqual(storedChunks(id), browser, 'rindle holds exactly what the browser got');
  const replay = await drain(readUIMessageStream({ stream: fromArray(storedChunks(id)) }));
  assert.deepEqual(replay.at(-1), (await uiMessageOf(browser)).message);
});

test('consumeSseStream without generateMessageId: rindle\'s copy gets the stream id, and the producer is warned once', async () => {
  const warnings = [];
  const warn = console.warn;
  console.warn = (...args) => warnings.push(args.join(' '));
  try {
    for (const n of [1, 2]) {
      const id = newStream(stack, `sse-noid-${n}`);
      const stream = await openUi(id);
      let consumed;
      const response = streamAnswer({ seed: 14 + n, kind: 'text' }).toUIMessageStreamResponse({ consumeSseStream: (sse) => void (consumed = stream.consumeSseStream(sse)) });
      await response.text();
      await consumed;
      assert.equal(storedChunks(id)[0].messageId, id);
    }
  } finally {
    console.warn = warn;
  }
  assert.equal(warnings.length, 1, JSON.stringify(warnings));
  assert.match(warnings[0], /generateMessageId/);
});

test('readUIMessage: from the text, from the row (body + chunk rows, offset-aware) and from /text, the message the SDK builds from the producer\'s chunks', async () => {
  const id = newStream(stack, 'read-back');
  const produced = await drain(streamAnswer({ seed: 21, kind: 'full' }).toUIMessageStream(uiStreamOptions(id)));
  assert.equal((await (await openUi(id)).pipe(fromArray(produced))).status, 'complete');
  const source = (await uiMessageOf(produced)).message;
  const text = rows(stack, id).row.body;
  assert.deepEqual(await readUIMessage({ text, readUIMessageStream }), source, 'from the text');
  assert.deepEqual(await readUIMessageOfTheTransport({ baseUrl: stack.baseUrl, streamId: id, token: await token(id, 'read'), readUIMessageStream }), source, 'from /text');
  // A row still streaming: a body, then chunk rows (`seq` = where each ends) that overlap it and
  // each other, as retried checkpoints leave them; and a last line still unfinished.
  const cut = (n) => text.slice(0, n);
  const lines = text.split('\n');
  const half = lines.slice(0, Math.floor(lines.length / 2)).join('\n').length + 1;
  const row = {
    id,
    body: cut(40),
    chunks: [
      { seq: half, text: text.slice(30, half) },
      { seq: 90, text: text.slice(20, 90) },
      { seq: half + 25, text: text.slice(half - 5, half + 25) },
    ],
  };
  const partial = await readUIMessage({ row, readUIMessageStream });
  const expected = (await uiMessageOf(uiChunksOf(text.slice(0, half + 25)))).message;
  const json = (m) => JSON.parse(JSON.stringify(m)); // as the history is sent (no undefined metadata)
  assert.deepEqual(json(partial), json(expected), 'the parts so far, assembled as /text assembles them');
  assert.ok(partial.parts.length > 0, 'it has parts');
  assert.notDeepEqual(json(partial), json(source), 'and is not the whole answer yet');
  await assert.rejects(readUIMessage({ text }), /readUIMessageStream/);
});
