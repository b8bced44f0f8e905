// The `ui` format against the real runtime (SPEC §9): a `ui` stream's text is NDJSON UI
// message chunks; `GET /ui` serves each complete line as one SSE event whose `id:` is the
// UTF-16 offset just after it, live from the object and, once the stream retired, from D1;
// an EventSource cut at seeded places on the wire resumes at an exact line end each time;
// every status has its ending; a streaming append may split a line (and a UTF-8 sequence)
// anywhere. The expected events are computed here from the produced text (JavaScript string
// lengths), independently of the Worker's encoder, and parsed with `eventsource-parser` and
// the `eventsource` package. E2E_SEED=<seed> replays a test's texts and cuts.
import test from 'node:test';
import assert from 'node:assert/strict';
import { EventSource } from 'eventsource';
import { startStack } from './harness.mjs';
import {
  api,
  call,
  checkFrames,
  durableFromDb,
  emojiText,
  isError,
  ndjson,
  newStream,
  ok,
  openPost,
  planCuts,
  rawRequest,
  rng,
  seedFromEnv,
  splitCodePoints,
  startProxy,
  uniqueId,
  until,
  untilEnd,
  withTimeout,
} from './util.mjs';

const LINGER_MS = 300; // finished streams retire quickly, so their /ui comes from D1
let stack;

test.before(async () => {
  stack = await startStack({ name: 'e2e-ui', vars: { LINGER_MS: String(LINGER_MS), LEASE_MS: '1000', RESUME_WINDOW_MS: '0' } });
});
test.after(async () => {
  await stack?.stop();
});

// ---------------------------------------------------------------------------------------
// The oracle: what /ui must serve for a text, from the SPEC alone.


/** The /ui events of the complete lines of `text`, joined at the start of the line holding `from`. */
function expectedLines(text, from = 0) {
  const at = Math.min(from, text.length);
  let pos = at === 0 ? 0 : text.lastIndexOf('\n', at - 1) + 1;
  const events = [];
  for (let nl = text.indexOf('\n', pos); nl !== -1; nl = text.indexOf('\n', pos)) {
    events.push({ id: String(nl + 1), data: text.slice(pos, nl) });
    pos = nl + 1;
  }
  return events;
}

// An ending's first event carries `id: done` (not an offset: the ending is not part of the text).
const ENDING = {
  finish: { id: 'done', data: '{"type":"finish"}' },
  abort: { id: 'done', data: '{"type":"abort"}' },
  error: (errorText) => ({ id: 'done', data: JSON.stringify({ type: 'error', errorText }) }),
  /** A reader that holds lines past the durable length the stream ended with is told what was saved. */
  unsaved: (status, durable, held, error) => ENDING.error(
    `only part of the answer shown was saved (${durable} of ${held} UTF-16 units): the stream ended ${status}${error ? `: ${error}` : ''}; reload to see the saved answer`,
  ),
  done: { id: undefined, data: '[DONE]' },
  /** `[DONE]` as the whole ending (the text's own finish ended the message). */
  onlyDone: { id: 'done', data: '[DONE]' },
};

/** The events of a /ui answer, as { id, data } (the `retry:` line and comments left out). */
const events = (records) => records.filter((f) => f.data !== undefined).map(({ id, data }) => ({ id, data }));

/** An AI SDK answer with reasoning, a tool call and text, full of emoji, CJK and skin tones. */
function answer(r, { finish = false } = {}) {
  const deltas = (key, id, units) => splitCodePoints(emojiText(r, units), r, 1, 12).map((d) => ({ type: `${key}-delta`, id, delta: d }));
  const chunks = [
    { type: 'start', messageId: uniqueId('msg') },
    { type: 'start-step' },
    { type: 'reasoning-start', id: 'r1' },
    ...deltas('reasoning', 'r1', 120),
    { type: 'reasoning-end', id: 'r1' },
    { type: 'tool-input-start', toolCallId: 'call-1', toolName: 'weather' },
    ...['{"city":', '"東京', ' 👋🏽"}'].map((d) => ({ type: 'tool-input-delta', toolCallId: 'call-1', inputTextDelta: d })),
    { type: 'tool-input-available', toolCallId: 'call-1', toolName: 'weather', input: { city: '東京 👋🏽' } },
    { type: 'tool-output-available', toolCallId: 'call-1', output: { celsius: 21, sky: '☀️' } },
    { type: 'text-start', id: 't1' },
    ...deltas('text', 't1', 300),
    { type: 'text-end', id: 't1' },
    { type: 'finish-step' },
  ];
  if (finish) chunks.push({ type: 'finish', finishReason: 'stop', messageMetadata: { usage: { outputTokens: 42 } } });
  return ndjson(chunks);
}

/** This test's seeded randomness (E2E_SEED=<seed> replays it). */
function seeded(t) {
  const seed = seedFromEnv();
  t.diagnostic(`seed ${seed} (E2E_SEED=${seed} replays it)`);
  return Object.assign(rng(seed), { seed });
}

/** A fresh message row with its `ui` stream opened. */
async function openUi(prefix) {
  const c = api(stack, newStream(stack, prefix));
  ok(await c.open(undefined, 'ui'), `open ${prefix}`);
  return c;
}

/** Length of the complete lines of `text` (what a ui stream's seq is before its close). */
const linesEnd = (text) => text.lastIndexOf('\n') + 1;

/** Waits until the object no longer holds the stream (its linger passed): /stats says not_open. */
const retired = (c) => until(async () => (await c.stats()).status === 404, `stream ${c.id} to retire after its linger`, 15_000);

/** Reads a /ui answer to its end (or to [DONE]); returns { status, headers, events, records }. */
async function readUi(c, from, headers = {}) {
  const sse = await c.ui(from, { headers });
  if (sse.status !== 200) {
    sse.close();
    return { status: sse.status, headers: sse.headers };
  }
  await sse.next((f) => f.data === '[DONE]', 20_000).catch(() => {}); // a body may also just end
  await withTimeout(sse.done, 15_000, 'the /ui body did not end after [DONE]');
  return { status: sse.status, headers: sse.headers, events: events(sse.frames), records: sse.frames };
}

// ---------------------------------------------------------------------------------------

test('a ui stream serves /ui live: each complete line once, id at its end, then finish and [DONE]', { timeout: 60_000 }, async (t) => {
  const r = seeded(t);
  const c = api(stack, newStream(stack, 'ui-live'));
  ok(await c.open({ chat: 'c1' }, 'ui'), 'open with meta');
  const ui = await c.ui(0);
  const ev = await c.events(0);
  assert.equal(ui.status, 200);
  assert.equal(ui.headers.get('content-type'), 'text/event-stream; charset=utf-8');
  assert.equal(ui.headers.get('x-vercel-ai-ui-message-stream'), 'v1');
  assert.equal(ui.headers.get('cache-control'), 'no-cache, no-transform');
  assert.equal(ui.headers.get('x-accel-buffering'), 'no');

  const produced = answer(r);
  let sent = '';
  for (const piece of splitCodePoints(produced, r, 1, 90)) {
    const rec = ok(await c.append(piece), 'append');
    sent += piece;
    assert.equal(rec.seq, linesEnd(sent), 'seq counts the complete lines only');
  }
  assert.equal(ok(await c.close(), 'close').status, 'complete');

  const [first] = ui.frames;
  await ui.next((f) => f.data === '[DONE]', 20_000);
  await withTimeout(ui.done, 15_000, 'the body ends after [DONE]');
  assert.equal(first.retry, 1000, 'the answer starts with a retry: line');
  assert.deepEqual(events(ui.frames), [...expectedLines(produced), ENDING.finish, ENDING.done], `seed ${r.seed}`);

  checkFrames(await untilEnd(ev), { label: '/events of the ui stream', produced }); // S on the NDJSON text
  assert.deepEqual(ok(await c.text(), '/text'), { text: produced, seq: produced.length, status: 'complete', format: 'ui' });
  assert.equal(durableFromDb(stack.db, c.id).text, produced, 'D1 holds the NDJSON as it was sent');
});

test('a finished ui stream is served from D1: from any offset, at the start of its line, Last-Event-ID over from', { timeout: 60_000 }, async (t) => {
  const r = seeded(t);
  const plain = await openUi('ui-d1');
  const ownFinish = await openUi('ui-d1f');
  const texts = [answer(r), answer(r, { finish: true })];
  for (const [c, text] of [[plain, texts[0]], [ownFinish, texts[1]]]) {
    ok(await c.append(text), 'append');
    ok(await c.close(), 'close');
    await retired(c);
  }
  const [text] = texts;
  const ends = expectedLines(text).map((e) => Number(e.id));
  const froms = [0, ends[2], ends[2] + 1, ends[5] - 1, text.length, r.int(0, text.length)];
  for (const from of froms) {
    const got = await readUi(plain, from);
    assert.equal(got.status, 200);
    assert.equal(got.headers.get('x-vercel-ai-ui-message-stream'), 'v1');
    assert.deepEqual(got.events, [...expectedLines(text, from), ENDING.finish, ENDING.done], `from ${from} (seed ${r.seed})`);
  }
  // Past the durable text: the reader holds lines that were never saved, and is told so.
  const past = await readUi(plain, text.length + 100);
  assert.deepEqual(past.events, [ENDING.unsaved('complete', text.length, text.length + 100), ENDING.done], 'from past the end');
  const resumed = await readUi(plain, 0, { 'last-event-id': String(ends[3]) });
  assert.deepEqual(resumed.events, [...expectedLines(text, ends[3]), ENDING.finish, ENDING.done], 'Last-Event-ID wins over from=0');
  const own = await readUi(ownFinish, 0);
  assert.deepEqual(own.events, [...expectedLines(texts[1]), ENDING.onlyDone], 'the text has its own finish: none is added');
});

test('every status has its ending on /ui, live and from D1', { timeout: 60_000 }, async (t) => {
  const r = seeded(t);
  const cases = [
    ['complete, own finish', async () => {}, [], { finish: true }],
    ['cancelled', async (c) => ok(await c.cancel(), 'cancel'), [ENDING.abort]],
    ['error', async (c) => ok(await c.fail('the model said "no" 🙅🏽'), 'fail'), [ENDING.error('the model said "no" 🙅🏽')]],
  ];
  await Promise.all(cases.map(async ([name, action, ending, opts = {}]) => {
    const c = await openUi('ui-end');
    const text = answer(r, opts);
    ok(await c.append(text), `${name}: append`);
    const live = await c.ui(0);
    await live.next((f) => f.data !== undefined);
    await action(c);
    if (name !== 'error') ok(await c.close(), `${name}: close`);
    await live.next((f) => f.data === '[DONE]', 20_000);
    await withTimeout(live.done, 15_000, `${name}: the live body did not end`);
    const expected = [...expectedLines(text), ...ending, ending.length ? ENDING.done : ENDING.onlyDone];
    assert.deepEqual(events(live.frames), expected, `${name}: live`);
    await retired(c);
    assert.deepEqual((await readUi(c, 0)).events, expected, `${name}: from D1`);
  }));
});

test('a real EventSource cut off mid-answer exactly 3 times resumes by itself at the exact line end each time', { timeout: 60_000 }, async (t) => {
  const r = seeded(t);
  const c = await openUi('ui-es');
  const produced = answer(r);
  const lines = expectedLines(produced);
  // Cuts at seeded places on the wire (after line event k, half of them inside the next one);
  // the test appends in step with the client, so every cut is reached before the close.
  const plan = planCuts(r, { cuts: 3, budget: Math.floor(lines.length / 2) });
  const proxy = await startProxy(stack.baseUrl, { cuts: plan });
  const got = [];
  let es;
  let errors = 0;
  const done = new Promise((resolve) => {
    // from=0 stays in the URL on every reconnect: only Last-Event-ID can put the client right.
    es = new EventSource(`${proxy.url}/streams/${c.id}/ui?from=0&token=${encodeURIComponent(c.readToken)}`);
    es.addEventListener('error', () => (errors += 1));
    es.addEventListener('message', (e) => {
      got.push({ data: e.data, lastEventId: e.lastEventId });
      if (e.data === '[DONE]') {
        es.close(); // the AI SDK's reader stops at [DONE]; an EventSource must close itself
        resolve();
      }
    });
  });
  try {
    let sent = '';
    for (const piece of splitCodePoints(produced, r, 20, 120)) {
      ok(await c.append(piece), 'append');
      sent += piece;
      const complete = expectedLines(sent).length;
      await until(() => got.length === complete, () => `the client to hold the ${complete} lines sent (it holds ${got.length}; cuts ${proxy.cuts}, seed ${r.seed})`, 15_000);
    }
    assert.equal(proxy.cuts, 3, `cuts made before the close (plan ${JSON.stringify(plan)}, seed ${r.seed})`);
    ok(await c.close(), 'close');
    await withTimeout(done, 20_000, () => `no [DONE] within 20 s; the client holds ${got.length} of ${lines.length} lines`);

    assert.equal(errors, 3, 'the EventSource saw each cut');
    assert.equal(proxy.requests.length, 4, 'one reconnect per cut');
    for (const [i, cut] of proxy.cutLog.entries()) {
      const resumedAt = proxy.requests[i + 1].headers['last-event-id'];
      assert.ok(lines.some((l) => l.id === resumedAt), `reconnect ${i + 1} resumes at a line end (${resumedAt})`);
      assert.equal(resumedAt, cut.lastId, `reconnect ${i + 1} resumes after the last line the client got whole (${JSON.stringify(cut)}, seed ${r.seed})`);
    }
    assert.deepEqual(got.slice(-2).map((e) => e.data), [ENDING.finish.data, '[DONE]'], 'the ending, then [DONE]');
    const lineEvents = got.slice(0, -2);
    assert.deepEqual(lineEvents.map((e) => e.data), lines.map((l) => l.data), `every line exactly once (seed ${r.seed})`);
    assert.deepEqual(lineEvents.map((e) => e.lastEventId), lines.map((l) => l.id), 'each with the offset after it as its id');
  } finally {
    es?.close();
    await proxy.close();
  }
});

test('a streaming append may split lines and UTF-8 sequences anywhere; a bad line is refused where it starts', { timeout: 60_000 }, async (t) => {
  const r = seeded(t);
  const c = await openUi('ui-stream');
  const live = await c.ui(0);
  const good = answer(r);
  const bytes = Buffer.from(good);
  const post = openPost(c.url('append'), { authorization: `Bearer ${c.token}`, 'content-type': 'application/x-ndjson' });
  let cuts = 0;
  for (let i = 0; i < bytes.length; ) {
    const j = Math.min(bytes.length, i + r.int(1, 40));
    if (j < bytes.length && (bytes[j] & 0xc0) === 0x80) cuts++; // inside a UTF-8 sequence
    await post.send(bytes.subarray(i, j));
    i = j;
  }
  assert.ok(cuts > 0, 'some pieces end inside a UTF-8 sequence');
  post.end();
  const answered = await post.answer;
  assert.equal(answered.status, 200, answered.text);
  assert.equal(JSON.parse(answered.text).seq, good.length);
  await live.next((f) => f.id === String(good.length), 10_000);
  assert.deepEqual(events(live.frames), expectedLines(good), 'every line once, whole, at its end');

  // Good lines, then a bad line split across pieces, then more: the bad one and the rest are refused.
  const more = ndjson([{ type: 'text-delta', id: 't2', delta: 'kept 日本' }]);
  const bad = Buffer.from('{"type":"text-delta","delta":"\xF0\x9F\x98"}\n', 'latin1'); // a sequence cut short
  const after = ndjson([{ type: 'text-delta', id: 't2', delta: 'never' }]);
  const refused = openPost(c.url('append'), { authorization: `Bearer ${c.token}` });
  for (const piece of [Buffer.from(more), bad.subarray(0, 20), bad.subarray(20), Buffer.from(after)]) await refused.send(piece);
  refused.end();
  const res = await refused.answer;
  assert.equal(res.status, 400, res.text);
  const body = JSON.parse(res.text);
  assert.equal(body.error, 'bad_chunk');
  assert.equal(body.offset, good.length + more.length, 'the offset where the bad line starts');
  assert.match(body.message, /UTF-8/);
  ok(await c.close(), 'close');
  await live.next((f) => f.data === '[DONE]', 10_000);
  assert.deepEqual(events(live.frames), [...expectedLines(good + more), ENDING.finish, ENDING.done]);
  assert.equal(durableFromDb(stack.db, c.id).text, good + more, 'nothing of the refused line reached D1');
});

test('a close keeps an unfinished last line in the text; /ui never serves it', { timeout: 30_000 }, async () => {
  const c = await openUi('ui-frag');
  const whole = ndjson([{ type: 'text-delta', id: 't', delta: 'whole 😀' }]);
  const fragment = '{"type":"text-delta","id":"t","delta":"cut 😀';
  assert.equal(ok(await c.append(whole + fragment), 'append').seq, whole.length);
  const closed = ok(await c.close(), 'close');
  assert.equal(closed.seq, whole.length + fragment.length, 'the close pushes the fragment');
  assert.deepEqual(ok(await c.text(), '/text').text, whole + fragment);
  assert.deepEqual((await readUi(c, 0)).events, [...expectedLines(whole), ENDING.finish, ENDING.done]);
});

test('/ui: 409 on a text stream, 404 on a stream never opened, HEAD without a reader, /text says the format', { timeout: 30_000 }, async () => {
  const text = api(stack, newStream(stack, 'ui-text'));
  ok(await text.open(), 'open a text stream');
  ok(await text.append('plain text 😀'), 'append');
  isError(await call(text.uiUrl(0)), 409, 'wrong_format', '/ui on a text stream');
  assert.equal(ok(await text.text(), '/text').format, 'text');
  isError(await call(api(stack, newStream(stack, 'ui-never')).uiUrl(0)), 404, 'no_stream', '/ui on a stream never opened');
  isError(await call(api(stack, uniqueId('ui-norow')).uiUrl(0)), 404, 'no_stream', '/ui without a row');

  const c = await openUi('ui-head');
  const head = await rawRequest(stack.baseUrl, { method: 'HEAD', path: `/streams/${c.id}/ui?token=${encodeURIComponent(c.readToken)}`, timeoutMs: 15_000 });
  assert.equal(head.status, 200);
  assert.equal(head.headers['x-vercel-ai-ui-message-stream'], 'v1');
  assert.equal(ok(await c.stats(), 'stats').readers, 0, 'a HEAD attaches no reader');
  isError(await call(c.uiUrl(0).replace(/token=[^&]+/, 'token=x')), 403, 'forbidden', 'a bad token');
  ok(await c.close(), 'close');
});

// The format was stored before the open settled, so a refused reopen as `text` overwrote the
// finished ui stream's format and its /ui answered 409 wrong_format (seen failing with the
// store moved back before the settlement).
test('a refused reopen leaves the finished stream its format: /ui still serves it from D1', { timeout: 30_000 }, async () => {
  const c = await openUi('ui-reopen');
  const text = '{"type":"start"}\n{"type":"text-start","id":"t"}\n';
  ok(await c.append(text), 'append');
  ok(await c.close(), 'close');
  await until(async () => (await c.stats()).status === 404, 'the stream retired after its linger window');
  isError(await c.open(undefined, 'text'), 409, 'open_refused', 'a reopen of the finished stream as text');
  assert.equal(ok(await c.text(), '/text').format, 'ui', '/text still says ui');
  assert.deepEqual((await readUi(c, 0)).events, [...expectedLines(text), ENDING.finish, ENDING.done]);
});

// Last: it kills the runtime.
test('a ui stream whose runtime died ends with the interrupted error from D1', { timeout: 60_000 }, async (t) => {
  const r = seeded(t);
  const c = await openUi('ui-kill');
  const text = answer(r);
  ok(await c.append(text), 'append');
  ok(await c.flush(), 'flush');
  await stack.kill();
  await stack.restart();
  await until(() => durableFromDb(stack.db, c.id).row.status === 'interrupted', 'the lease to seal the row interrupted', 20_000);
  const { row } = durableFromDb(stack.db, c.id);
  assert.deepEqual((await readUi(c, 0)).events, [...expectedLines(text), ENDING.error(row.error), ENDING.done]);
});
