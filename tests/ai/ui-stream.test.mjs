// The AI SDK dialect end to end with the real `ai` package (7.x) against the real local runtime
// (wrangler dev = workerd + local D1). This test is the app: its chat endpoint (reached through
// the transport's `fetch` option) inserts the row and is the producer (AI SDK streamText on the
// example's scripted mock model → toUIMessageStream → public/producer.js, one streaming append
// over Node's fetch), keeping the producer's own chunks. The answer is read with
// public/chat-transport.js (RindleChatTransport.sendMessages) through a proxy that cuts the
// connection exactly 5 times, at seeded places on the wire (after event k, half of them inside
// the next event), while the model holds the answer's end until every cut was made: the cuts
// depend on the seed alone, never on how fast the model, the runtime or the reader go.
//
// For text-only, reasoning + text, and tool call + tool result + text answers (each with emoji,
// CJK, a ZWJ sequence and a skin-tone modifier): the chunks the reader gets are exactly the
// producer's chunks (no gap, no repeat), and the UI message `readUIMessageStream` builds from
// them deep-equals the one it builds from the producer's own chunks; D1 holds them as NDJSON; the
// producer's calls are open, ONE append (still unanswered when the reader gets its first chunk:
// a streaming body), close, with its watch beside them.
// Then the endings: cancel (abort, the model stops), an upstream error, a UI error chunk, a text
// stream read as ui (409), a bad token (403), and an unreachable stream API (give-up).
// Each test prints its seed; E2E_SEED=<seed> replays the cuts (and the answers).
import test from 'node:test';
import assert from 'node:assert/strict';
import { freePort, startStack } from '../e2e/harness.mjs';
import { newStream, planCuts, rng, rows, seedFromEnv, startProxy, uiMessageOf, withTimeout } from '../e2e/util.mjs';
import { openStream, signStreamToken } from '../../public/producer.js';
import { RindleChatTransport, readUIStream } from '../../public/chat-transport.js';
import { seedOf, streamAnswer, uiStreamOptions } from '../../examples/chat/answer.js';

const SEED = seedFromEnv();
const CUTS = 5;
// One model stream part every 6 ms, so the reader reads some of the answer live and some as a
// replay; the cuts and the assertions do not depend on it.
const PACE_MS = 6;
/** The UI chunks of an answer after the model's hold (scriptedModel's `holdEnd`): text-end, finish-step, finish. */
const AFTER_HOLD = 3;

let stack;
test.before(async () => {
  // SSE_RETRY_MS: the transport's first reconnect waits at most this long (the server's `retry:`).
  stack = await startStack({ name: 'ai-ui-stream', demo: true, vars: { SSE_RETRY_MS: '50' } }); // demo: public/ served, as by scripts/run.sh
});
test.after(() => stack?.stop());

/** Everything a ReadableStream yields, in order. */
async function drain(stream) {
  const out = [];
  for await (const value of stream) out.push(value);
  return out;
}

const producerToken = (id) => signStreamToken({ secret: stack.secret, stream: id, scope: 'write' });
const readerToken = (id) => signStreamToken({ secret: stack.secret, stream: id, scope: 'read cancel' });
const openUi = async (id, more = {}) => openStream({ baseUrl: stack.baseUrl, streamId: id, token: await producerToken(id), format: 'ui', ...more });

/** The producer's calls but its watch. */
const writes = (calls) => calls.filter((c) => c.action !== 'watch');

/** A `fetch` for the producer helpers that records each stream API call: { action, answered }. */
function recordingFetch(calls) {
  return async (request) => {
    const call = { action: new URL(request.url).pathname.split('/').pop(), answered: false };
    calls.push(call);
    const response = await fetch(request);
    call.answered = true;
    return response;
  };
}

const API = 'http://app.invalid/api/chat';

/**
 * The app side of the transport's contract, played by the test: `POST {api}` inserts the answer's
 * row, opens a `ui` stream and starts `produce(stream, id)` (the producer); `GET {api}/{chat}/stream`
 * answers the chat's streaming answer. Everything else goes to the network. Returns the
 * transport's `fetch` and the answers it started ({ id, chatId, stream, produced, ended }).
 */
function app(produce) {
  const answers = [];
  const fetchImpl = async (url, init = {}) => {
    if (!String(url).startsWith(API)) return fetch(url, init);
    const active = /\/api\/chat\/([^/]+)\/stream$/.exec(url);
    if (active) {
      const answer = answers.findLast((a) => a.chatId === decodeURIComponent(active[1]) && rows(stack, a.id).row.status === 'streaming');
      return answer ? Response.json({ streamId: answer.id, token: await readerToken(answer.id) }) : new Response(null, { status: 204 });
    }
    const { id: chatId, messages } = JSON.parse(init.body);
    assert.equal(messages.at(-1).role, 'user', 'the AI SDK sends the conversation');
    const id = newStream(stack, 'ui');
    const calls = [];
    const stream = await openUi(id, { fetch: recordingFetch(calls) });
    const answer = { id, chatId, stream, calls, ...produce(stream, id) };
    answers.push(answer);
    return Response.json({ streamId: id, token: await readerToken(id) });
  };
  return { fetch: fetchImpl, answers };
}

/** A producer of the scripted answer: `{ produced: the producer's own chunks, ended: pipe's result }`. */
const scripted = (options) => (stream, id) => {
  const result = streamAnswer({ ...options, abortSignal: stream.signal });
  const [mine, sent] = result.toUIMessageStream(uiStreamOptions(id)).tee();
  return { produced: drain(mine), ended: stream.pipe(sent) };
};

const ask = (transport, chatId, abortSignal) =>
  transport.sendMessages({
    chatId,
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal,
    messages: [{ id: `${chatId}-q`, role: 'user', parts: [{ type: 'text', text: 'Weather in Tokyo? 東京 👍🏽' }] }],
  });

for (const kind of ['text', 'reasoning', 'tool']) {
  test(`${kind} answer: the transport's chunks are the producer's, and readUIMessageStream builds the same message, across exactly ${CUTS} cuts`, async (t) => {
    const seed = (SEED ^ seedOf(kind)) >>> 0;
    t.diagnostic(`seed ${SEED} (E2E_SEED=${SEED} replays the answer and its cuts)`);
    const label = `E2E_SEED=${SEED}`;
    // How many chunks the answer has: the script is deterministic, so count it offline.
    const total = (await drain(streamAnswer({ seed, kind }).toUIMessageStream(uiStreamOptions('count')))).length;
    const plan = planCuts(rng(seed), { cuts: CUTS, budget: total - AFTER_HOLD });
    const proxy = await startProxy(stack.baseUrl, { cuts: plan });
    const reconnects = [];
    // The model holds the answer's end until every planned cut was made.
    const { fetch: appFetch, answers } = app(scripted({ seed, kind, delayMs: PACE_MS, holdEnd: () => proxy.allCut }));
    const transport = new RindleChatTransport({ api: API, streamsUrl: proxy.url, fetch: appFetch, onReconnect: (e) => reconnects.push(e) });
    try {
      const stream = await ask(transport, `chat-${kind}`);
      const [{ id, produced, ended, calls }] = answers;
      const chunks = [];
      let appendOpenAtFirstChunk;
      const read = (async () => {
        for await (const chunk of stream) {
          if (chunks.push(chunk) === 1) appendOpenAtFirstChunk = writes(calls).map((c) => [c.action, c.answered]);
        }
      })();
      await withTimeout(read, 60_000, () => `${label}: the answer did not end; ${proxy.cuts} of ${CUTS} cuts made (${JSON.stringify(plan)}), ${chunks.length} chunks read`);
      assert.equal((await ended).status, 'complete', label);
      // The whole answer went as ONE append, still open (unanswered) when the reader got its first
      // chunk; beside it the producer's watch, held from the open (a cancel's channel).
      assert.deepEqual(writes(calls).map((c) => c.action), ['open', 'append', 'close'], `${label}: the producer's calls`);
      assert.equal(calls.filter((c) => c.action === 'watch').length, 1, `${label}: one watch`);
      assert.deepEqual(appendOpenAtFirstChunk, [['open', true], ['append', false]], `${label}: one streaming append`);
      // Exactly the planned cuts, each followed by one reconnect from the last event it got whole.
      assert.equal(proxy.cuts, CUTS, `${label}: cuts made`);
      assert.deepEqual(proxy.cutLog.map((c) => c.events), plan.map((c) => c.afterEvent), `${label}: each cut after its planned event`);
      const resumedFrom = proxy.cutLog.map((c) => Number(c.lastId));
      assert.deepEqual(reconnects.map((e) => [e.streamId, e.from]), resumedFrom.map((from) => [id, from]), `${label}: one reconnect per cut, each from the last id it got`);
      // On the wire: the first read from 0, every reconnect from where the cut left it.
      const froms = proxy.requests.filter((q) => q.url.includes('/ui?')).map((q) => Number(new URL(q.url, proxy.url).searchParams.get('from')));
      assert.deepEqual(froms, [0, ...resumedFrom], `${label}: the reads' from`);
      assert.ok(resumedFrom.every((f, i) => f > (resumedFrom[i - 1] ?? 0)), `${label}: every connection delivered something: ${resumedFrom}`);
      // Exactly the producer's chunks, in order: no gap, no repeat. (Its own `finish` is in the
      // text, so the server adds no ending of its own.)
      const source = await produced;
      assert.equal(source.length, total, `${label}: the producer sent the answer counted offline`);
      assert.deepEqual(chunks, source, `${label}: chunks differ`);
      const want = await uiMessageOf(source);
      const got = await uiMessageOf(chunks);
      assert.deepEqual(got, want, label);
      assert.deepEqual(got.errors, []);
      assert.equal(got.message.id, id, 'the UI message id is the stream id');
      const text = JSON.stringify(got.message.parts);
      for (const piece of ['東京', '👍🏽', '👩🏽‍💻', '🎉']) assert.ok(text.includes(piece), `${label}: ${piece} missing`);
      if (kind === 'tool') assert.ok(got.message.parts.some((p) => p.type === 'tool-weather' && p.state === 'output-available'), label);
      if (kind === 'reasoning') assert.ok(got.message.parts.some((p) => p.type === 'reasoning' && p.text.length > 0), label);

      // D1 holds the producer's chunks as NDJSON, one per line.
      const { row, chunks: chunkRows } = rows(stack, id);
      assert.equal(row.status, 'complete');
      assert.equal(chunkRows.length, 0, 'compacted at the seal');
      assert.equal(row.body, source.map((c) => `${JSON.stringify(c)}\n`).join(''));
    } finally {
      await proxy.close();
    }
  });
}

test('reconnectToStream mid-answer replays it whole from the start; with no answer streaming it is null', async () => {
  // The model holds the answer's end until the replay has started: it is mid-answer for certain.
  let release;
  const replayStarted = new Promise((resolve) => (release = resolve));
  const { fetch: appFetch, answers } = app(scripted({ seed: SEED, kind: 'full', delayMs: PACE_MS, holdEnd: () => replayStarted }));
  const transport = new RindleChatTransport({ api: API, streamsUrl: stack.baseUrl, fetch: appFetch });
  assert.equal(transport.resumeStreamIsReplay, true);
  const first = await ask(transport, 'chat-replay');
  const reader = first.getReader();
  for (let i = 0; i < 10; i++) await reader.read();
  const replay = await transport.reconnectToStream({ chatId: 'chat-replay' });
  assert.ok(replay, 'the app named the streaming answer');
  release();
  const firstDone = (async () => {
    while (!(await reader.read()).done);
  })();
  const replayed = await drain(replay);
  await firstDone;
  const [{ produced, ended }] = answers;
  assert.equal((await ended).status, 'complete');
  assert.deepEqual(replayed, await produced, 'the replay starts at the first chunk and ends with the last');
  assert.equal(await transport.reconnectToStream({ chatId: 'chat-replay' }), null, 'nothing streaming any more');
});

test('stop() (the abort signal) cancels the answer: the model stops, the row ends `cancelled`, other readers get `abort`', async () => {
  let stopped;
  const modelStopped = new Promise((resolve) => { stopped = resolve; });
  // The model holds the answer's end for ever: only the stop can end it.
  const { fetch: appFetch, answers } = app(scripted({ seed: SEED, kind: 'full', delayMs: PACE_MS, onStop: stopped, holdEnd: () => new Promise(() => {}) }));
  const transport = new RindleChatTransport({ api: API, streamsUrl: stack.baseUrl, fetch: appFetch });
  const controller = new AbortController();
  const mine = (await ask(transport, 'chat-stop', controller.signal)).getReader();
  const [{ id, stream, ended }] = answers;
  const other = drain(readUIStream({ streamId: id, token: await readerToken(id), streamsUrl: stack.baseUrl })); // a second tab
  for (let i = 0; i < 20; i++) assert.equal((await mine.read()).done, false);
  controller.abort(); // what useChat's stop() does
  await mine.cancel(); // …and the SDK stops reading
  assert.equal((await ended).status, 'cancelled');
  assert.equal(stream.cancelled, true);
  assert.equal(stream.signal.reason?.name, 'AbortError');
  assert.match(String(await modelStopped), /aborted|cancelled/);
  assert.equal(rows(stack, id).row.status, 'cancelled');
  const seen = await other;
  assert.deepEqual(seen.at(-1), { type: 'abort' }, 'the other reader ends with abort');
  assert.equal(seen.filter((c) => c.type === 'abort').length, 1);
  const full = await drain(streamAnswer({ seed: SEED, kind: 'full' }).toUIMessageStream(uiStreamOptions(id)));
  assert.ok(seen.length < full.length, `stopped before the end (${seen.length} of ${full.length} chunks)`);
});

// With the helpers' resume (SPEC §10) the lost append is a resume cause: the helper resumes and
// re-sends, and the re-sent append's answer says `cancelled`; without it (`resume: false`) the
// helper's `fail` learns the cancel. Either way the pipe resolves `cancelled`. The watch is off
// here: it would hear the cancel first and spare the resume (tests/survival/stop.test.mjs).
for (const resume of [undefined, false]) {
  test(`a streaming append cut off after a cancel (simulated fault) resolves \`cancelled\`${resume === false ? ' (resume: false)' : ' (resumed)'}: pipe does not reject, the row and the readers say \`cancelled\``, async () => {
    const id = newStream(stack, 'ui');
    // The fault, simulated in the producer's fetch: a reader cancels, and the cancel's early
    // answer tears the append's connection down before fetch has read it (undici: "terminated").
    let cut = false;
    const cutAfterCancel = async (request) => {
      if (!cut && new URL(request.url).pathname.endsWith('/append')) {
        cut = true;
        const cancelled = await fetch(`${stack.baseUrl}/streams/${id}/cancel`, { method: 'POST', headers: { authorization: `Bearer ${await readerToken(id)}` } });
        assert.equal(cancelled.status, 200);
        throw new TypeError('terminated');
      }
      return fetch(request);
    };
    const resumes = [];
    const stream = await openUi(id, { fetch: cutAfterCancel, resume, watch: false, onResume: (info) => resumes.push(info.cause) });
    const reader = drain(readUIStream({ streamId: id, token: await readerToken(id), streamsUrl: stack.baseUrl }));
    const source = new ReadableStream({ start: (c) => c.enqueue({ type: 'start' }) }); // a model still running
    const ended = await stream.pipe(source);
    assert.equal(ended.status, 'cancelled');
    assert.equal(stream.cancelled, true);
    assert.equal(stream.signal.reason?.name, 'AbortError');
    assert.deepEqual(resumes, resume === false ? [] : ['connection']);
    assert.equal(rows(stack, id).row.status, 'cancelled');
    assert.deepEqual((await reader).at(-1), { type: 'abort' });
  });
}

test('a finished answer read later (no cuts) replays the same chunks', async () => {
  const id = newStream(stack, 'ui-late');
  const stream = await openUi(id);
  const produced = await drain(streamAnswer({ seed: SEED, kind: 'full' }).toUIMessageStream(uiStreamOptions(id)));
  const ended = await stream.pipe(new ReadableStream({ start(c) { produced.forEach((x) => c.enqueue(x)); c.close(); } }));
  assert.equal(ended.status, 'complete');
  const chunks = await drain(readUIStream({ streamId: id, token: await readerToken(id), streamsUrl: stack.baseUrl }));
  assert.deepEqual(chunks, produced);
});

test('an upstream that throws ends the stream `error`: readers get an `error` ending with its message', async () => {
  const id = newStream(stack, 'ui-throw');
  const stream = await openUi(id);
  let n = 0;
  const upstream = new ReadableStream({
    pull(controller) {
      n += 1;
      if (n === 1) controller.enqueue({ type: 'start', messageId: id });
      else if (n === 2) controller.enqueue({ type: 'text-start', id: 't' });
      else if (n < 6) controller.enqueue({ type: 'text-delta', id: 't', delta: `片${n}👍🏽` });
      else controller.error(new Error('model connection reset 💥'));
    },
  });
  const ended = await stream.pipe(upstream);
  assert.equal(ended.status, 'error');
  const chunks = await drain(readUIStream({ streamId: id, token: await readerToken(id), streamsUrl: stack.baseUrl }));
  assert.equal(chunks.length, 6);
  assert.deepEqual(chunks.at(-1), { type: 'error', errorText: 'model connection reset 💥' });
  const { row } = rows(stack, id);
  assert.equal(row.status, 'error');
  assert.equal(row.error, 'model connection reset 💥');
});

test('a UI `error` chunk from the SDK (a failed generation) ends the stream `error`', async () => {
  const id = newStream(stack, 'ui-errchunk');
  const stream = await openUi(id);
  const produced = [{ type: 'start', messageId: id }, { type: 'error', errorText: 'rate limited 🐢' }];
  const ended = await stream.pipe(new ReadableStream({ start(c) { produced.forEach((x) => c.enqueue(x)); c.close(); } }));
  assert.equal(ended.status, 'error');
  const chunks = await drain(readUIStream({ streamId: id, token: await readerToken(id), streamsUrl: stack.baseUrl }));
  // The producer's own error line is the ending: the server adds none (onError fires once).
  assert.deepEqual(chunks, produced);
  assert.equal(rows(stack, id).row.status, 'error');
});

test('a text stream piped from the SDK textStream reads back as its text', async () => {
  const id = newStream(stack, 'text-pipe');
  const stream = await openStream({ baseUrl: stack.baseUrl, streamId: id, token: await producerToken(id) });
  const result = streamAnswer({ seed: SEED, kind: 'text' });
  const ended = await stream.pipe(result.textStream);
  assert.equal(ended.status, 'complete');
  const text = await result.text;
  assert.equal(rows(stack, id).row.body, text);
  assert.ok(text.includes('👍🏽'));
});

test('readUIStream ends with an `error` chunk when the stream cannot be read: 409 text stream, 403 token, unreachable API', async () => {
  const id = newStream(stack, 'ui-wrong');
  const textStream = await openStream({ baseUrl: stack.baseUrl, streamId: id, token: await producerToken(id) });
  await textStream.append('plain text');
  const wrong = await drain(readUIStream({ streamId: id, token: await readerToken(id), streamsUrl: stack.baseUrl }));
  assert.equal(wrong.length, 1);
  assert.equal(wrong[0].type, 'error');
  assert.match(wrong[0].errorText, /409/);
  await textStream.close();

  const denied = await drain(readUIStream({ streamId: id, token: 'not-a-token', streamsUrl: stack.baseUrl }));
  assert.equal(denied.length, 1);
  assert.match(denied[0].errorText, /403 forbidden/);

  // Nothing listens on this port: every attempt fails; the stream still ends, with an error.
  const port = await freePort();
  const reconnects = [];
  const gone = await drain(readUIStream({
    streamId: id, token: 'x', streamsUrl: `http://127.0.0.1:${port}`, retry: { initialDelayMs: 20, giveUpAfterMs: 400 }, onReconnect: (e) => reconnects.push(e),
  }));
  assert.equal(gone.length, 1);
  assert.equal(gone[0].type, 'error');
  assert.match(gone[0].errorText, /gave up reconnecting/);
  assert.ok(reconnects.length >= 2, `${reconnects.length} attempts`);
  assert.ok(reconnects.every((e, i) => i === 0 || e.attempt > reconnects[i - 1].attempt), 'attempts count up while nothing is delivered');
});

test('the Worker run with --assets public (the demo) serves the shipped modules and their types as they are in public/', async () => {
  const { readFileSync } = await import('node:fs');
  for (const file of ['chat-transport.js', 'chat-transport.d.ts', 'producer.js', 'producer.d.ts']) {
    const res = await fetch(`${stack.baseUrl}/${file}`);
    assert.equal(res.status, 200, file);
    assert.equal(await res.text(), readFileSync(new URL(`../../public/${file}`, import.meta.url), 'utf8'), file);
  }
});
