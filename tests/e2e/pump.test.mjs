// POST /streams/{id}/pump against the real Worker (wrangler dev + local D1) and the mock model
// server (mock/model-server.mjs): the Durable Object fetches the upstream itself, pushes each
// text delta, and seals the stream at the upstream's final event (`complete`), on any upstream
// failure (`error`, with a clear message in the row's `error` column and the `end` frame), or
// on a cancel (`cancelled`, with the upstream request aborted). On a `ui` stream it pushes AI
// SDK UI message chunks, which the real `ai` package turns into the expected message. The
// upstream's API key reaches the upstream and never the Worker's logs. One stack and one mock
// for the whole file.
import test from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { existsSync, readFileSync } from 'node:fs';
import { startMock, startStack } from './harness.mjs';
import { accepted, openWithReader as openPumpStream, pump } from './pump-helpers.mjs';
import { api, call, checkFrames, isError, newStream, ok, rows, until, untilEnd } from './util.mjs';
import { DefaultChatTransport, readUIMessageStream } from 'ai';
import { mockAnswer, mockText, mockTokens } from '../../mock/mock-text.mjs';

/** The upstream API key every pump in this file sends; it must never reach the Worker's logs. */
const SECRET = `sk-rindle-e2e-${Math.random().toString(36).slice(2)}-DO-NOT-LOG`;
const FORMATS = {
  'openai-chat': { path: '/v1/chat/completions', headers: { authorization: `Bearer ${SECRET}` } },
  'openai-responses': { path: '/v1/responses', headers: { authorization: `Bearer ${SECRET}` } },
  anthropic: { path: '/v1/messages', headers: { 'x-api-key': SECRET, 'anthropic-version': '2023-06-01' } },
};

let stack;
let mock;

test.before(async () => {
  mock = await startMock();
  stack = await startStack({ name: 'e2e-pump' });
});
test.after(async () => {
  await stack?.stop();
  await mock?.stop();
});

/** The mock's record of every upstream request so far. */
async function mockRequests() {
  const res = await fetch(`${mock.url}/_mock/requests`);
  return res.json();
}

/** The mock's record of the request whose query has `tag` (every pump here tags its URL). */
async function mockRequest(tag) {
  const found = (await mockRequests()).filter((r) => r.query.tag === tag);
  assert.equal(found.length, 1, `one upstream request tagged ${tag}: ${JSON.stringify(found)}`);
  return found[0];
}

/** A pump request body for `format` against the mock with these query options. */
function pumpBody(format, query, extra = {}) {
  const { path, headers } = FORMATS[format];
  const q = new URLSearchParams(Object.entries(query).map(([k, v]) => [k, String(v)]));
  return {
    format,
    url: `${mock.url}${path}?${q}`,
    headers,
    body: { model: 'mock', stream: true, messages: [{ role: 'user', content: 'Say something awkward.' }] },
    ...extra,
  };
}

const openWithReader = (prefix) => openPumpStream(stack, prefix);

let tagCounter = 0;
const newTag = (what) => `${what}-${++tagCounter}`;

// ---------------------------------------------------------------------------------------
// The three formats: exact text, sealed complete, every reader ends with it.

for (const format of Object.keys(FORMATS)) {
  test(`pump ${format}: D1 body is exactly the mock's text, status complete, readers (from the start and mid-stream) end with it`, { timeout: 30_000 }, async () => {
    const seed = 11 + tagCounter;
    const tokens = 150;
    const expected = mockText({ seed, tokens });
    const tag = newTag(format);
    const { id, s, reader } = await openWithReader(`pump-${format}`);

    // The mock holds the answer half-way until the second reader has joined: mid-stream for certain.
    await mock.hold(seed, tokens / 2);
    accepted(await pump(s, pumpBody(format, { tokens, rate: 300, seed, tag })), id);
    await reader.next((f) => f.json?.type === 'chunk');
    const late = await s.events(0);
    assert.equal(late.frames.find((f) => f.json?.type === 'open').json.ended, false, 'the second reader joined while the pump ran');
    await mock.release(seed);
    const [early, joined] = await Promise.all([untilEnd(reader), untilEnd(late)]);

    const a = checkFrames(early, 'reader from the start');
    assert.equal(a.end?.status, 'complete', JSON.stringify(a.end));
    assert.equal(a.end.error, undefined);
    assert.equal(a.text, expected, 'the reader attached before the pump got exactly the mock text');
    assert.equal(a.end.seq, expected.length, 'end.seq is the UTF-16 length');
    const b = checkFrames(joined, 'reader that joined mid-stream');
    assert.equal(b.end?.status, 'complete');
    assert.equal(b.text, expected, 'the late reader got exactly the mock text');

    const { row, chunks } = rows(stack, id);
    assert.equal(row.status, 'complete');
    assert.equal(row.body, expected, 'the D1 body is exactly the mock text');
    assert.equal(row.seq, expected.length);
    assert.equal(row.error, null);
    assert.deepEqual(chunks, [], 'compacted: no chunk rows left');
    const text = ok(await s.text(), 'text');
    assert.equal(text.text, expected);
    assert.equal(text.seq, expected.length);
    assert.equal(text.status, 'complete');

    const up = await mockRequest(tag);
    assert.equal(up.completed, true, 'the upstream finished its response');
    assert.equal(up.aborted, false);
    assert.equal(up.tokensSent, tokens);
    assert.equal(up.path, FORMATS[format].path);
    assert.equal(up.authorization, true, 'the upstream got the API key header');
    assert.deepEqual(up.body, pumpBody(format, {}).body, 'the upstream got the JSON body as given');
  });
}

// ---------------------------------------------------------------------------------------
// Upstream failures seal `error` with a clear message: the status and a fixed sentence, never
// the upstream's own bytes (an error answer's body and a malformed event go to the log only),
// but for an API's own error event, whose message the API meant for its caller.

const FAILURES = {
  http500: {
    message: /^the upstream answered HTTP 500$/,
    body: () => '', // nothing was produced
  },
  error: {
    message: {
      'openai-chat': /^the upstream reported an error: The server had an error while processing your request\.$/,
      'openai-responses': /^the upstream reported an error: The server had an error while processing your request\.$/,
      anthropic: /^the upstream reported an error: Overloaded$/,
    },
    body: (exact) => exact, // every delta before the error event
  },
  malformed: {
    message: /^the upstream sent an event the pump cannot read$/,
    body: (exact) => exact, // every delta before the malformed one
  },
  drop: {
    message: /^the upstream stream (failed|ended before its final event)/,
    body: null, // a prefix of what was sent before the socket died
  },
};

for (const [fail, spec] of Object.entries(FAILURES)) {
  for (const format of Object.keys(FORMATS)) {
    test(`pump ${format} fail=${fail}: sealed error with a clear message`, { timeout: 30_000 }, async () => {
      const seed = 40 + tagCounter;
      const tokens = 40;
      const failAt = 17;
      const beforeFailure = mockTokens({ seed, tokens }).slice(0, failAt).join('');
      const tag = newTag(`${format}-${fail}`);
      const { id, s, reader } = await openWithReader(`fail-${fail}`);

      accepted(await pump(s, pumpBody(format, { tokens, rate: 0, seed, fail, failAt, tag })), id);
      const seen = checkFrames(await untilEnd(reader), `reader (${fail})`);
      const { row, chunks } = rows(stack, id);

      const re = spec.message instanceof RegExp ? spec.message : spec.message[format];
      assert.equal(seen.end?.status, 'error', JSON.stringify(seen.end));
      assert.match(seen.end.error ?? '', re, 'the end frame says why');
      assert.equal(row.status, 'error');
      assert.equal(row.error, seen.end.error, 'the row records the same message');
      assert.ok(!row.error.includes(SECRET), 'the message does not carry the key');

      const body = row.body ?? '';
      if (spec.body) assert.equal(body, spec.body(beforeFailure), 'the body is the text before the failure');
      else assert.ok(beforeFailure.startsWith(body), `the body is a prefix of the text sent before the failure (${body.length} units)`);
      assert.equal(seen.text, body, 'the reader got exactly the sealed text');
      assert.equal(row.seq, body.length);
      assert.equal(seen.end.seq, body.length);
      assert.deepEqual(chunks, []);
      const text = ok(await s.text(), 'text');
      assert.equal(text.text, body);
      assert.equal(text.seq, body.length);
      assert.equal(text.status, 'error');

      const up = await mockRequest(tag);
      assert.equal(up.fail, fail, 'the mock did inject the failure');
      // After a malformed line the mock carries on (the consumer decides), so it may complete.
      if (fail !== 'malformed') assert.equal(up.completed, false);
    });
  }
}

test('pump: an upstream response that ends cleanly before its final event seals error', { timeout: 30_000 }, async (t) => {
  // The mock's `drop` kills the socket (a transport error); this upstream instead ends its
  // response properly, just without the format's final event (`[DONE]`).
  const pieces = ['Half ', 'an ', 'answer 🦀'];
  const server = http.createServer((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (const p of pieces) res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: p }, finish_reason: null }] })}\n\n`);
    res.end();
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => server.close(r)));
  const { id, s, reader } = await openWithReader('truncated');
  accepted(await pump(s, { format: 'openai-chat', url: `http://127.0.0.1:${server.address().port}/v1/chat/completions`, body: { stream: true } }), id);
  const seen = checkFrames(await untilEnd(reader), 'reader (truncated)');
  const { row } = rows(stack, id);
  assert.equal(seen.end?.status, 'error');
  assert.match(seen.end.error ?? '', /ended before its final event/);
  assert.equal(row.status, 'error');
  assert.equal(row.error, seen.end.error);
  assert.equal(row.body, pieces.join(''));
  assert.equal(seen.text, pieces.join(''));
});

// ---------------------------------------------------------------------------------------
// Cancel mid-pump: the upstream request is aborted and the stream seals `cancelled`.

test('pump: a cancel mid-pump aborts the upstream request and seals cancelled', { timeout: 30_000 }, async () => {
  const seed = 77;
  const tokens = 400;
  const tag = newTag('cancel');
  const full = mockText({ seed, tokens });
  const { id, s, reader } = await openWithReader('cancel');

  // The upstream stops after 15 tokens and waits (fail=stall): the cancel comes mid-pump.
  const sent = mockTokens({ seed, tokens }).slice(0, 15).join('');
  accepted(await pump(s, pumpBody('anthropic', { tokens, rate: 50, seed, tag, fail: 'stall', failAt: 15 })), id);
  let shown = '';
  await reader.next((f) => f.json?.type === 'chunk' && (shown += f.json.text).length >= sent.length);
  const cancelled = await fetch(s.url('cancel'), { method: 'POST', headers: { authorization: `Bearer ${stack.token(id, 'cancel')}` } });
  assert.equal(cancelled.status, 200, await cancelled.text());

  const seen = checkFrames(await untilEnd(reader), 'reader (cancel)');
  assert.equal(seen.end?.status, 'cancelled', JSON.stringify(seen.end));
  const up = await until(async () => {
    const r = await mockRequest(tag);
    return r.aborted ? r : null;
  }, 'the mock to see its request aborted', 15_000);
  assert.equal(up.aborted, true, 'the Worker closed the upstream connection');
  assert.equal(up.completed, false);
  assert.equal(up.tokensSent, 15, 'the upstream sent 15 tokens, then waited');

  const { row, chunks } = rows(stack, id);
  assert.equal(row.status, 'cancelled');
  assert.equal(row.body, sent, 'the body is the text sent before the cancel');
  assert.ok(row.body.length < full.length && full.startsWith(row.body), 'a prefix of the mock text');
  assert.equal(row.seq, row.body.length);
  assert.equal(seen.text, row.body, 'the reader got exactly the sealed text');
  assert.deepEqual(chunks, []);
});

// ---------------------------------------------------------------------------------------
// Refusals: bad bodies, not open, a second pump, the wrong scope.

test('pump refusals: 400 bad_upstream for bad bodies (the stream stays usable), 404 not_open, 409 pump_running, 403 without write scope', { timeout: 30_000 }, async () => {
  const { id, s, reader } = await openWithReader('refuse');
  const goodTag = newTag('after-refusals');
  const good = pumpBody('openai-chat', { tokens: 60, rate: 0, seed: 5, tag: goodTag });
  const bad = {
    'not JSON': 'this is not json',
    'empty body': '',
    'a JSON array': '[]',
    'no format': JSON.stringify({ url: good.url }),
    'no url': JSON.stringify({ format: 'anthropic' }),
    'unknown format': JSON.stringify({ ...good, format: 'gemini' }),
    'ftp url': JSON.stringify({ ...good, url: 'ftp://127.0.0.1/v1/messages' }),
    'relative url': JSON.stringify({ ...good, url: '/v1/messages' }),
    'url with a space': JSON.stringify({ ...good, url: `${mock.url}/v1/chat completions` }),
    'header value with CRLF': JSON.stringify({ ...good, headers: { authorization: 'Bearer x\r\nx-injected: 1' } }),
    'header name with a space': JSON.stringify({ ...good, headers: { 'bad name': 'x' } }),
    'header value not a string': JSON.stringify({ ...good, headers: { authorization: 42 } }),
    'method DELETE': JSON.stringify({ ...good, method: 'DELETE' }),
    'unknown field': JSON.stringify({ ...good, model: 'gpt' }),
  };
  const upstreamBefore = (await mockRequests()).length;
  for (const [what, body] of Object.entries(bad)) {
    const res = await pump(s, body);
    isError(res, 400, 'bad_upstream', what);
  }
  assert.equal((await mockRequests()).length, upstreamBefore, 'no refused pump reached the upstream');

  // The refusals changed nothing: the stream is still open and a good pump runs to the end.
  accepted(await pump(s, good), id);
  const seen = checkFrames(await untilEnd(reader), 'reader (after refusals)');
  assert.equal(seen.end?.status, 'complete');
  assert.equal(seen.text, mockText({ seed: 5, tokens: 60 }));

  // 409 pump_running: a pump whose upstream waits after its first token (fail=stall) is still
  // running when the second arrives, and until the cancel.
  const slow = await openWithReader('refuse-409');
  const slowTag = newTag('slow');
  accepted(await pump(slow.s, pumpBody('anthropic', { tokens: 200, rate: 100, seed: 6, tag: slowTag, fail: 'stall', failAt: 1 })), slow.id);
  isError(await pump(slow.s, pumpBody('openai-chat', { tokens: 5, seed: 6, tag: newTag('second') })), 409, 'pump_running', 'second pump');
  // The pump holds the stream's producer epoch: the producer that started it can neither write
  // nor take the stream over with a resume while it runs (before, a resume was granted a new
  // epoch and its writes interleaved with the pump's).
  const asProducer = (action, body) => fetch(slow.s.url(action), {
    method: 'POST',
    headers: { authorization: `Bearer ${slow.s.token}`, 'x-rindle-epoch': '1', 'content-type': 'text/plain' },
    body,
  }).then(async (res) => {
    const raw = await res.text();
    return { status: res.status, headers: res.headers, raw, json: JSON.parse(raw) };
  });
  isError(await asProducer('append', 'interleaved?'), 409, 'pump_running', 'an append during the pump');
  isError(await asProducer('resume'), 409, 'pump_running', 'a resume during the pump');
  // The refusals below are answered before the body would be read (the object then discards
  // it; the last test of this file checks that a refused body breaks nothing).
  for (const scope of ['read', 'cancel']) {
    isError(await postEmpty(slow.s.url('pump'), stack.token(slow.id, scope)), 403, 'forbidden', `${scope} token`);
  }
  ok(await slow.s.cancel(), 'cancel the slow pump');
  const slowSeen = checkFrames(await untilEnd(slow.reader), 'reader (slow)');
  assert.equal(slowSeen.end?.status, 'cancelled');
  assert.equal((await mockRequests()).filter((r) => r.query.seed === '6').length, 1, 'only the first pump reached the upstream');

  // 404 not_open: a row that exists but was never opened; 409 closed: a stream already sealed.
  const never = api(stack, newStream(stack, 'never-opened'));
  isError(await postEmpty(never.url('pump'), never.token), 404, 'not_open', 'never opened');
  isError(await postEmpty(s.url('pump'), s.token), 409, 'closed', 'pump after the seal');
});

/** POST with no body. */
function postEmpty(url, token) {
  return call(url, { method: 'POST', headers: { authorization: `Bearer ${token}` } });
}

// ---------------------------------------------------------------------------------------
// The pump in ui format (SPEC §9): the upstream's reasoning, tool call, text, usage and finish
// reason become UI message chunks, and the real AI SDK builds the message from `/ui`.

/** A fresh stream opened with `{"format": "ui"}`. */
async function openUi(prefix) {
  const id = newStream(stack, prefix);
  const s = api(stack, id);
  ok(await s.open(undefined, 'ui'), 'open ui');
  return { id, s };
}

/**
 * Reads `/ui` with the real AI SDK: its `DefaultChatTransport` fetches and parses the SSE
 * (validating every chunk against its schema) and `readUIMessageStream` builds the message.
 * Resolves once the transport's stream is open (the reader is attached); `done` resolves to
 * { message, chunks (as the SDK parsed them), errors (what onError got) } at the stream's end.
 */
async function readUi(s) {
  const transport = new DefaultChatTransport({
    api: 'unused',
    prepareReconnectToStreamRequest: () => ({ api: s.uiUrl() }),
  });
  const stream = await transport.reconnectToStream({ chatId: s.id });
  assert.ok(stream, '/ui answered a stream');
  const chunks = [];
  const errors = [];
  const tapped = stream.pipeThrough(new TransformStream({ transform(chunk, controller) {
    chunks.push(chunk);
    controller.enqueue(chunk);
  } }));
  const done = (async () => {
    let message;
    for await (const m of readUIMessageStream({ stream: tapped, onError: (e) => errors.push(e.message) })) message = m;
    // Plain JSON, as the message is stored and sent (no undefined-valued keys).
    return { message: JSON.parse(JSON.stringify(message ?? null)), chunks, errors };
  })();
  return { done };
}

/**
 * The message the AI SDK must build from a pumped answer (mockAnswer: what the mock sent), with
 * the upstream's random ids checked and replaced by placeholders: the tool call id, and
 * Anthropic's reasoning signature.
 */
function expectedMessage(id, format, answer, usage) {
  return {
    id,
    metadata: { usage, finishReason: answer.tool ? 'tool-calls' : 'stop' },
    role: 'assistant',
    parts: [
      { type: 'step-start' },
      ...(answer.reasoningTokens.length ? [{
        type: 'reasoning', id: 'reasoning-0', text: answer.reasoningTokens.join(''), state: 'done',
        ...(format === 'anthropic' ? { providerMetadata: { anthropic: { signature: '<signature>' } } } : {}),
      }] : []),
      { type: 'text', text: answer.textTokens.join(''), state: 'done' },
      ...(answer.tool ? [{ type: `tool-${answer.tool.name}`, toolCallId: '<call id>', state: 'input-available', input: answer.tool.input }] : []),
    ],
  };
}

function withPlaceholders(message, format) {
  for (const part of message?.parts ?? []) {
    if (part.toolCallId) {
      assert.match(part.toolCallId, format === 'anthropic' ? /^toolu_/ : /^call_/, 'the upstream\'s tool call id');
      part.toolCallId = '<call id>';
    }
    const signature = part.providerMetadata?.anthropic?.signature;
    if (signature) {
      assert.match(signature, /^EqQB/, 'the upstream\'s reasoning signature');
      part.providerMetadata.anthropic.signature = '<signature>';
    }
  }
  return message;
}

/** The usage the mock reports, in the AI SDK's `LanguageModelUsage` shape (`raw` checked apart). */
function expectedUsage(format, answer) {
  const reasoning = answer.reasoningTokens.length;
  const output = reasoning + answer.textTokens.length + (answer.tool?.pieces.length ?? 0);
  return format === 'anthropic'
    ? { inputTokens: 12, inputTokenDetails: { noCacheTokens: 12, cacheReadTokens: 0, cacheWriteTokens: 0 }, outputTokens: output, outputTokenDetails: { textTokens: output }, totalTokens: 12 + output }
    : { inputTokens: 12, inputTokenDetails: { noCacheTokens: 12, cacheReadTokens: 0 }, outputTokens: output, outputTokenDetails: { textTokens: output - reasoning, reasoningTokens: reasoning }, totalTokens: 12 + output };
}

for (const format of Object.keys(FORMATS)) {
  test(`pump ${format} into a ui stream: reasoning, a tool call with streamed input, text and usage build the AI SDK message, live and replayed from D1`, { timeout: 30_000 }, async () => {
    const opts = { tokens: 40, seed: 60 + tagCounter, reasoning: 12, tool: 'get_weather' };
    const answer = mockAnswer(opts);
    const tag = newTag(`ui-${format}`);
    const { id, s } = await openUi(`ui-${format}`);
    const live = await readUi(s);

    accepted(await pump(s, pumpBody(format, { ...opts, rate: 400, tag, ...(format === 'openai-chat' ? { usage: 1 } : {}) })), id);
    const seen = await live.done;
    assert.deepEqual(seen.errors, []);
    const types = seen.chunks.map((c) => c.type);
    assert.deepEqual([types[0], types[1], types.at(-2), types.at(-1)], ['start', 'start-step', 'finish-step', 'finish']);
    assert.equal(types.filter((t) => t === 'finish').length, 1, 'the pump\'s finish, and no synthesized one');
    assert.ok(types.filter((t) => t === 'tool-input-delta').length >= 2, 'the tool input is streamed');
    const usage = seen.message?.metadata?.usage;
    assert.equal(typeof usage?.raw, 'object', 'the upstream\'s own usage object is kept');
    delete usage.raw;
    assert.deepEqual(withPlaceholders(seen.message, format), expectedMessage(id, format, answer, expectedUsage(format, answer)));

    // The row: complete, its body the NDJSON the readers got; a late reader replays it from D1.
    const { row, chunks } = rows(stack, id);
    assert.equal(row.status, 'complete');
    assert.deepEqual(chunks, []);
    const lines = row.body.split('\n');
    assert.equal(lines.pop(), '', 'the body ends at a line end');
    assert.deepEqual(lines.map((l) => JSON.parse(l).type), types);
    const replay = await (await readUi(s)).done;
    assert.deepEqual(replay.chunks, seen.chunks, 'a replay from D1 gives the same chunks');

    const up = await mockRequest(tag);
    assert.equal(up.completed, true);
  });
}

test('pump into a ui stream: a text-only answer is a start, one text part and a finish with the finish reason', { timeout: 30_000 }, async () => {
  const opts = { tokens: 60, seed: 71 };
  const { id, s } = await openUi('ui-text-only');
  const live = await readUi(s);
  accepted(await pump(s, pumpBody('anthropic', { ...opts, rate: 0, tag: newTag('ui-text-only') })), id);
  const seen = await live.done;
  assert.deepEqual(seen.errors, []);
  delete seen.message.metadata.usage.raw;
  assert.deepEqual(seen.message, expectedMessage(id, 'anthropic', mockAnswer(opts), expectedUsage('anthropic', mockAnswer(opts))));
  assert.deepEqual(seen.chunks.map((c) => c.type), ['start', 'start-step', 'text-start', ...Array(60).fill('text-delta'), 'text-end', 'finish-step', 'finish']);
});

test('pump into a ui stream: an upstream error fails the stream, and the /ui reader gets the error ending after the chunks so far', { timeout: 30_000 }, async () => {
  const opts = { tokens: 30, seed: 72, reasoning: 5, tool: 'get_weather' };
  const tag = newTag('ui-error');
  const { id, s } = await openUi('ui-error');
  const live = await readUi(s);
  accepted(await pump(s, pumpBody('openai-responses', { ...opts, rate: 0, fail: 'error', failAt: 10, tag })), id);
  const seen = await live.done;
  const error = /^the upstream reported an error: The server had an error while processing your request\.$/;
  assert.equal(seen.chunks.at(-1).type, 'error');
  assert.match(seen.chunks.at(-1).errorText, error);
  assert.equal(seen.errors.length, 1);
  assert.match(seen.errors[0], error, 'the AI SDK reported the error');
  assert.ok(!seen.chunks.some((c) => c.type === 'finish' || c.type.startsWith('tool-')), 'no finish, and the tool call never started');
  const text = seen.message.parts.find((p) => p.type === 'text');
  assert.equal(text.text, mockTokens({ seed: 72, tokens: 30 }).slice(0, 10).join(''), 'the text before the error is kept');
  const { row } = rows(stack, id);
  assert.equal(row.status, 'error');
  assert.match(row.error, error);
});

test('pump into a ui stream: a cancel aborts the upstream, and the /ui reader gets abort', { timeout: 30_000 }, async () => {
  const tag = newTag('ui-cancel');
  const { id, s } = await openUi('ui-cancel');
  const live = await readUi(s);
  // The upstream waits after 10 text tokens (fail=stall): the cancel comes mid-pump.
  accepted(await pump(s, pumpBody('anthropic', { tokens: 400, rate: 50, seed: 73, reasoning: 5, tag, fail: 'stall', failAt: 10 })), id);
  await until(async () => (await mockRequests()).find((r) => r.query.tag === tag)?.tokensSent >= 10, 'the upstream to send 10 text tokens');
  ok(await s.cancel(), 'cancel');
  const seen = await live.done;
  assert.equal(seen.chunks.at(-1).type, 'abort');
  assert.deepEqual(seen.errors, []);
  assert.ok(!seen.chunks.some((c) => c.type === 'finish'));
  assert.equal(rows(stack, id).row.status, 'cancelled');
  const up = await until(async () => {
    const r = await mockRequest(tag);
    return r.aborted ? r : null;
  }, 'the mock to see its request aborted', 15_000);
  assert.equal(up.completed, false);
});

// ---------------------------------------------------------------------------------------
// The key: sent upstream, never logged. Runs last: every pump above carried the key.

test('pump: the upstream got the API key headers, and the Worker logs never contain the key', { timeout: 30_000 }, async () => {
  // One more pump with the key in the URL's query as well (some APIs take `?key=`).
  const tag = newTag('key');
  const { id, s, reader } = await openWithReader('key');
  accepted(await pump(s, pumpBody('openai-responses', { tokens: 30, rate: 0, seed: 3, tag, key: SECRET })), id);
  const seen = checkFrames(await untilEnd(reader), 'reader (key)');
  assert.equal(seen.end?.status, 'complete');

  const all = await mockRequests();
  assert.ok(all.length >= 21, `${all.length} upstream requests in this file`);
  for (const r of all) assert.equal(r.authorization, true, `request ${r.id} (${r.path}?${new URLSearchParams(r.query)}) carried the key`);

  // The negative checks below mean something only once this pump's own lines are there: its
  // end is logged after its last token, in wrangler's output and then in the log file.
  const finished = new RegExp(`"event":"pump_finished".*"streamId":"${id}"`);
  await stack.waitForLog(finished);
  assert.ok(stack.logFile && existsSync(stack.logFile), `wrangler's log file ${stack.logFile}`);
  const file = await until(() => {
    const text = readFileSync(stack.logFile, 'utf8');
    return finished.test(text) && text;
  }, `this pump's pump_finished line in ${stack.logFile}`);
  assert.match(file, /"event":"pump_started"/, 'the log file does hold the pump logs');
  assert.match(file, /"event":"pump_failed"/, 'including the failures');
  for (const [where, text] of [['wrangler output', stack.logs()], [stack.logFile, file]]) {
    assert.ok(!text.includes(SECRET), `the key appears in ${where}`);
    assert.ok(!text.includes(encodeURIComponent(SECRET)), `the URL-encoded key appears in ${where}`);
  }
  // The pump logs name the upstream without its query.
  assert.ok(!/tag=/.test(file), 'the upstream query is not logged');
});

// ---------------------------------------------------------------------------------------
// Worker bug (src/edge/stream/mod.rs + src/edge/front/mod.rs): the front Worker forwards the request body
// as a stream to the Durable Object, and the object answers 403 / 404 not_open / 409 closed
// BEFORE reading it. workerd then logs "Uncaught TypeError: Can't read from request stream
// after response has been sent", and under wrangler dev the NEXT request on the connection
// fails: a POST gets 503 "Your worker restarted mid-request", a GET hangs. Runs last, since it
// leaves that state behind.

test('a refused pump that carries a body does not break the next request', { timeout: 60_000 }, async () => {
  const id = newStream(stack, 'body-bug');
  const s = api(stack, id);
  ok(await s.open(), 'open');
  const body = JSON.stringify(pumpBody('openai-chat', { tokens: 5 }));
  const closedId = newStream(stack, 'body-bug-never-opened');
  const refused = [
    // [what, stream, token, expected status]: each is answered before its body is read.
    ['403 read-only token', id, stack.token(id, 'read'), 403],
    ['404 not_open', closedId, stack.token(closedId), 404],
  ];
  const post = (url, token, init = {}) => fetch(url, {
    method: 'POST', headers: { authorization: `Bearer ${token}`, ...init.headers }, body: init.body, signal: AbortSignal.timeout(5000),
  }).then(async (res) => ({ status: res.status, raw: await res.text() }), (e) => ({ status: `no answer (${e.name})`, raw: '' }));
  const failures = [];
  for (let i = 0; i < 8; i++) {
    for (const [what, stream, token, status] of refused) {
      const res = await post(api(stack, stream).url('pump'), token, { headers: { 'content-type': 'application/json' }, body });
      if (res.status !== status) failures.push(`${what}: ${res.status} ${res.raw.slice(0, 80)}`);
      // The request after it: a plain append on a live stream.
      const next = await post(s.url('append'), s.token, { headers: { 'content-type': 'text/plain' }, body: 'x' });
      if (next.status !== 200) failures.push(`the append after "${what}": ${next.status} ${next.raw.slice(0, 80)}`);
    }
  }
  const uncaught = (stack.logs().match(/Can't read from request stream after response has been sent/g) ?? []).length;
  assert.deepEqual(failures, [], `requests broken by an earlier refusal (${uncaught} uncaught TypeErrors logged)`);
  assert.equal(uncaught, 0, 'uncaught "Can\'t read from request stream" errors in the Worker log');
});
