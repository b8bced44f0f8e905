// The pump in background mode (issue 35 item 7, SPEC §10) against the real Worker (wrangler dev
// + local D1) and the mock model server in background mode (mock/model-server.mjs): an
// `openai-responses` pump with `"background": true` and its credential named as a Worker secret
// (`auth.secret`, on the PUMP_SECRETS allow-list). The mock's generation runs whether or not the
// object listens, and the tests pace it (holdAt, release) and cut the object's connection
// (fail=stall, then /_mock/drop) when they choose, never the clock.
//
// Shown here, without an object reset: the answer streams and ends `complete`; a cancel cancels
// the response upstream; the key is in no file of the object's storage or D1 and in no log; a
// secret not on the allow-list, or pinned elsewhere, is 400; a lost connection re-attaches with
// `starting_after` and the answer ends `complete`; a perturbed replay ends `interrupted` with the
// text written so far and never a splice; an expired replay ends `complete` through the stored
// response, or `interrupted` while it is still generating. And with a reset: the runtime killed
// mid-answer and restarted, a reader wakes the fresh instance, which rebuilds the stream from D1
// and re-attaches from the stored record; the answer ends `complete`, generated once.
import test from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { jsonOrUndefined, startMock, startStack } from './harness.mjs';
import { accepted, openWithReader as openPumpStream, pump } from './pump-helpers.mjs';
import { api, assertPrefix, checkFrames, durableFromDb, isError, newStream, ok, rng, rows, seedFromEnv, uiChunksOf, uiMessageOf, until, untilEnd } from './util.mjs';
import { mockText, mockTokens } from '../../mock/mock-text.mjs';

/** The upstream key, a Worker secret: it must reach the upstream and nothing else. */
const KEY = `sk-rindle-bg-${Math.random().toString(36).slice(2)}-DO-NOT-STORE`;

let stack;
let mock;

test.before(async () => {
  mock = await startMock();
  stack = await startStack({
    name: 'e2e-pump-background',
    // A short resume window: the multi-kill test's later resets come after an earlier life's
    // window passed (a pump that re-attached must not leave it behind).
    // No idle timeout: the upstream is held for as long as a test likes, and a rebuilt stream's
    // window is then the resume window alone (with one, it would wait what remains of it).
    vars: {
      PUMP_UPSTREAMS: `${mock.url}/v1/ https://api.openai.com/v1/`,
      PUMP_SECRETS: `MOCK_KEY=${mock.url}/v1/,OTHER_KEY=https://api.openai.com/v1/`,
      RESUME_WINDOW_MS: '1000',
      IDLE_TIMEOUT_MS: '0',
    },
    // UNLISTED_KEY is set but not on the allow-list.
    secrets: { MOCK_KEY: KEY, OTHER_KEY: 'sk-other-origin', UNLISTED_KEY: 'sk-unlisted' },
  });
});
test.after(async () => {
  await stack?.stop();
  await mock?.stop();
});

let tagCounter = 0;
const newTag = (what) => `bg-${what}-${++tagCounter}`;

/** A background pump's request body: the mock's Responses endpoint with these query options. */
function backgroundPump(query, extra = {}) {
  const q = new URLSearchParams(Object.entries(query).map(([k, v]) => [k, String(v)]));
  return {
    format: 'openai-responses',
    url: `${mock.url}/v1/responses?${q}`,
    auth: { secret: 'MOCK_KEY' },
    body: { model: 'mock', input: 'Say something awkward.', stream: true, background: true },
    ...extra,
  };
}

const openWithReader = (prefix) => openPumpStream(stack, prefix);

/** The mock's background response tagged `tag`, once the object's create request made it. */
async function generation(tag, ready = () => true) {
  return until(async () => {
    const found = (await (await fetch(`${mock.url}/_mock/responses`)).json()).filter((g) => g.tag === tag);
    assert.ok(found.length <= 1, `one background response tagged ${tag}: ${JSON.stringify(found)}`);
    return found[0] && ready(found[0]) ? found[0] : null;
  }, `the mock's background response ${tag} (${ready})`);
}

/** Every request the mock saw about the response `id` (re-attaches, retrieves, cancels) or tagged `tag`. */
async function upstreamRequests(tag, id) {
  const all = await (await fetch(`${mock.url}/_mock/requests`)).json();
  return all.filter((r) => r.query.tag === tag || (id && r.responseId === id));
}

/** A mock control (release, perturb, expire, drop) on the response tagged `tag`. */
async function control(what, tag, params = {}) {
  const res = await fetch(`${mock.url}/_mock/${what}?${new URLSearchParams({ tag, ...params })}`, { method: 'POST' });
  assert.equal(res.status, 200, `${what}: ${await res.text()}`);
}

/** Waits until `reader` has had the stream's text up to `units` UTF-16 units. */
const readerReaches = (reader, units) => reader.next((f) => f.json?.type === 'chunk' && f.json.seq >= units, 20_000);

const sha256 = (s) => createHash('sha256').update(s).digest('hex');

/**
 * Pumps `tokens` tokens with the generation held before token `holdAt` and, given `stallAt`, the
 * object's connection stalled after token `stallAt`; waits until the reader has what the object
 * was sent and the mock has generated up to the hold (or to its end). Returns what the test needs.
 */
async function heldPump(what, { seed, tokens = 120, holdAt = tokens, stallAt, extra = {} }) {
  const tag = newTag(what);
  const { id, s, reader } = await openWithReader(`bg-${what}`);
  const all = mockTokens({ seed, tokens });
  const stall = stallAt === undefined ? {} : { fail: 'stall', failAt: stallAt };
  accepted(await pump(s, backgroundPump({ tokens, rate: 0, seed, tag, holdAt, ...stall, ...extra })), id);
  const written = all.slice(0, stallAt ?? holdAt).join('');
  await readerReaches(reader, written.length);
  const g = await generation(tag, (r) => r.textTokens === Math.min(holdAt, tokens) && (holdAt < tokens || r.status === 'completed'));
  return { tag, id, s, reader, g, written, expected: all.join('') };
}

// ---------------------------------------------------------------------------------------

test('background pump: the answer streams while the upstream generates, ends complete, and the mock saw one create with the secret\'s key', { timeout: 60_000 }, async () => {
  // The generation holds before token 40: the reader has the text produced so far.
  const { tag, id, reader, g, expected } = await heldPump('complete', { seed: 101, tokens: 150, holdAt: 40 });
  assert.equal(g.status, 'in_progress');
  await control('release', tag);

  const seen = checkFrames(await untilEnd(reader), { label: 'reader', produced: expected });
  assert.equal(seen.end.status, 'complete', JSON.stringify(seen.end));
  assert.equal(seen.text, expected);
  const { row, chunks } = rows(stack, id);
  assert.equal(row.status, 'complete');
  assert.equal(row.body, expected);
  assert.deepEqual(chunks, []);

  const done = await generation(tag);
  assert.equal(done.status, 'completed');
  assert.deepEqual([done.creates, done.reattaches, done.cancels], [1, [], 0], 'one create, no re-attach, no cancel');
  const [create] = await upstreamRequests(tag);
  assert.equal(create.kind, 'create');
  assert.equal(create.body.background, true);
  assert.equal(create.credential, sha256(`Bearer ${KEY}`), 'the upstream got the secret\'s value as a bearer token');
  assert.equal(create.query.tag, tag, 'the create keeps its query');
});

test('background pump: a cancel seals cancelled and cancels the response upstream', { timeout: 60_000 }, async () => {
  const { tag, id, s, reader, g } = await heldPump('cancel', { seed: 102, tokens: 200, holdAt: 20 });

  ok(await s.cancel(), 'cancel');
  const seen = checkFrames(await untilEnd(reader), 'reader (cancel)');
  assert.equal(seen.end.status, 'cancelled');
  // The generation never finishes on its own here (it is held): only the upstream cancel ends it.
  const after = await generation(tag, (r) => r.cancels > 0);
  assert.equal(after.status, 'cancelled', 'the upstream generation was cancelled');
  assert.equal(after.cancels, 1);
  const cancels = (await upstreamRequests(tag, g.id)).filter((r) => r.kind === 'cancel');
  assert.equal(cancels.length, 1);
  assert.equal(cancels[0].path, '/v1/responses/{id}/cancel');
  assert.equal(cancels[0].credential, sha256(`Bearer ${KEY}`), 'the cancel carried the key, read from the secret');
  const { row } = rows(stack, id);
  assert.equal(row.status, 'cancelled');
  assert.equal(row.body, seen.text);
});

test('background pump: the key is in no file of the object\'s storage or D1, and in no log; the response id is', { timeout: 60_000 }, async () => {
  const { tag, id, s, reader, g } = await heldPump('stored', { seed: 103, holdAt: 60 });
  ok(await s.flush(), 'flush'); // the text is in D1 too (a flush is taken while the pump is the producer)

  /** Every file of the stack's local state (the objects' SQLite storage, D1, their WALs). */
  const files = (dir) => readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : [join(dir, e.name)]));
  const holding = (needle) => files(stack.persistDir).filter((f) => readFileSync(f).includes(Buffer.from(needle)));
  // Positive control: the record (with the response id) is on disk, so the search looks where it is.
  const withId = await until(() => {
    const found = holding(g.id);
    return found.length ? found : null;
  }, `the response id ${g.id} in the object's storage under ${stack.persistDir}`);
  assert.ok(withId.some((f) => !f.includes('D1DatabaseObject')), `the record is in the object's storage: ${withId}`);
  assert.deepEqual(holding(KEY), [], 'no file holds the key');
  assert.deepEqual(holding(sha256(KEY)), []);

  await control('release', tag);
  assert.equal(checkFrames(await untilEnd(reader), 'reader (stored)').end.status, 'complete');
  await stack.waitForLog(new RegExp(`"event":"pump_finished".*"streamId":"${id}"`));
  assert.ok(!stack.logs().includes(KEY), 'the logs never hold the key');
  assert.deepEqual(holding(KEY), [], 'no file holds the key after the pump either');
});

test('pump refusals: a secret not on the allow-list, pinned to another origin, the signing secret, or a background pump carrying a key are 400, and nothing reaches the upstream', { timeout: 60_000 }, async () => {
  const { id, s, reader } = await openWithReader('bg-refuse');
  const tag = newTag('refuse');
  const good = backgroundPump({ tokens: 30, rate: 0, seed: 104, tag });
  const bad = {
    'a secret set but not listed': [{ ...good, auth: { secret: 'UNLISTED_KEY' } }, /UNLISTED_KEY.*not on the PUMP_SECRETS allow-list/],
    'the signing secret': [{ ...good, auth: { secret: 'STREAM_JWT_SECRET' } }, /STREAM_JWT_SECRET.*not on the PUMP_SECRETS allow-list/],
    'a secret never set': [{ ...good, auth: { secret: 'NOT_A_SECRET' } }, /not on the PUMP_SECRETS allow-list/],
    'a secret pinned to another origin': [{ ...good, auth: { secret: 'OTHER_KEY' } }, /OTHER_KEY may be sent only to https:\/\/api\.openai\.com\/v1\//],
    'a background pump with the key in a header': [
      { ...good, auth: undefined, headers: { authorization: `Bearer ${KEY}` } },
      /a background pump names its credential with auth\.secret/,
    ],
    'auth and a credential header': [{ ...good, headers: { 'x-api-key': 'k' } }, /header "x-api-key" may not carry another/],
    'a background pump that does not stream': [{ ...good, body: { ...good.body, stream: false } }, /must have "stream": true/],
    'auth that is not an object': [{ ...good, auth: 'MOCK_KEY' }, /./],
    'auth with an unknown field': [{ ...good, auth: { secret: 'MOCK_KEY', value: KEY } }, /unknown field/],
  };
  const before = (await (await fetch(`${mock.url}/_mock/requests`)).json()).length;
  for (const [what, [body, message]] of Object.entries(bad)) {
    const res = await pump(s, body);
    isError(res, 400, 'bad_upstream', what);
    assert.match(res.json.message, message, what);
    assert.ok(!res.raw.includes(KEY), `${what}: the answer does not echo the key`);
  }
  assert.equal((await (await fetch(`${mock.url}/_mock/requests`)).json()).length, before, 'no refused pump reached the upstream');

  // The stream is still usable: the good pump runs to its end.
  accepted(await pump(s, good), id);
  const seen = checkFrames(await untilEnd(reader), { label: 'reader (after refusals)', produced: mockText({ seed: 104, tokens: 30 }) });
  assert.equal(seen.end.status, 'complete');
});

// ---------------------------------------------------------------------------------------
// A lost connection: the response runs on upstream, and the pump re-attaches to it.

test('background pump: a lost connection re-attaches with starting_after, the replay is checked, and the answer ends complete', { timeout: 60_000 }, async () => {
  const { tag, id, reader, g, expected } = await heldPump('reattach', { seed: 105, stallAt: 50, holdAt: 90 });
  await control('drop', tag);
  // The re-attach catches up to the held generation; then the rest comes live.
  await readerReaches(reader, mockTokens({ seed: 105, tokens: 120 }).slice(0, 90).join('').length);
  await control('release', tag);

  const seen = checkFrames(await untilEnd(reader), { label: 'reader (reattach)', produced: expected });
  assert.equal(seen.end.status, 'complete', JSON.stringify(seen.end));
  assert.equal(seen.text, expected, 'no text repeated or lost across the re-attach');
  const { row } = rows(stack, id);
  assert.equal(row.status, 'complete');
  assert.equal(row.body, expected);

  const done = await generation(tag);
  assert.equal(done.creates, 1, 'the answer was generated once');
  assert.equal(done.reattaches.length, 1, JSON.stringify(done.reattaches));
  const { startingAfter } = done.reattaches[0];
  assert.ok(Number.isInteger(startingAfter) && startingAfter >= 0, `re-attached with starting_after=${startingAfter}`);
  const requests = await upstreamRequests(tag, g.id);
  const reattach = requests.find((r) => r.kind === 'reattach');
  assert.equal(reattach.query.stream, 'true');
  assert.equal(reattach.query.tag, undefined, 'the re-attach URL is the endpoint without the create\'s query');
  assert.equal(reattach.credential, sha256(`Bearer ${KEY}`), 'the key was read from the secret again');
  assert.equal(requests.filter((r) => r.kind === 'cancel').length, 0, 'a complete answer cancels nothing');
  await stack.waitForLog(new RegExp(`"event":"pump_reattaching".*"streamId":"${id}"`));
});

test('background pump: a replay that differs from the text written ends interrupted with that text, never a splice, and the response is cancelled upstream', { timeout: 60_000 }, async () => {
  // The replay changes the text from token 45 on: inside what the object already wrote (50).
  const { tag, id, reader, g, written } = await heldPump('perturbed', { seed: 106, stallAt: 50, holdAt: 90, extra: { perturbAt: 45 } });
  await control('drop', tag);
  const seen = checkFrames(await untilEnd(reader), 'reader (perturbed)');
  assert.equal(seen.end.status, 'interrupted', JSON.stringify(seen.end));
  assert.match(seen.end.error, /^re-attaching the pump: the replay differs from the text already written at offset \d+ \(not spliced\)$/);
  assert.equal(seen.text, written, 'the reader has exactly the text written before the connection was lost');
  const { row, chunks } = rows(stack, id);
  assert.equal(row.status, 'interrupted');
  assert.equal(row.body, written, 'the row keeps the text written, nothing of the replay');
  assert.equal(row.error, seen.end.error);
  assert.deepEqual(chunks, []);
  const offset = Number(/offset (\d+)/.exec(row.error)[1]);
  assert.equal(offset, mockTokens({ seed: 106, tokens: 120 }).slice(0, 45).join('').length, 'the difference is where the replay changed');

  const after = await generation(tag, (r) => r.cancels > 0);
  assert.equal(after.status, 'cancelled', 'the response runs on for nobody no longer');
  assert.deepEqual(after.reattaches.map((r) => r.perturbed), [true]);
  assert.equal((await upstreamRequests(tag, g.id)).filter((r) => r.kind === 'cancel').length, 1);
});

test('background pump: an expired replay ends complete through the stored response', { timeout: 60_000 }, async () => {
  // The generation completes while the object's connection is stalled; then the replay expires.
  const { tag, id, reader, g, expected } = await heldPump('expired', { seed: 107, stallAt: 40 });
  assert.equal(g.status, 'completed');
  await control('expire', tag);
  await control('drop', tag);
  const seen = checkFrames(await untilEnd(reader), { label: 'reader (expired)', produced: expected });
  assert.equal(seen.end.status, 'complete', JSON.stringify(seen.end));
  assert.equal(seen.text, expected);
  assert.equal(rows(stack, id).row.body, expected);
  const done = await generation(tag);
  assert.deepEqual(done.reattaches, [{ startingAfter: done.reattaches[0].startingAfter, refused: 404 }], 'the re-attach was refused as expired');
  assert.equal(done.retrieves, 1, 'the stored response was read');
  const retrieve = (await upstreamRequests(tag, g.id)).find((r) => r.kind === 'retrieve');
  assert.equal(retrieve.credential, sha256(`Bearer ${KEY}`));
});

test('background pump: an expired replay of a response still generating ends interrupted with the text written, and cancels it upstream', { timeout: 60_000 }, async () => {
  const { tag, id, reader, written } = await heldPump('expired-busy', { seed: 108, stallAt: 40, holdAt: 80 });
  await control('expire', tag);
  await control('drop', tag);
  const seen = checkFrames(await untilEnd(reader), 'reader (expired, still generating)');
  assert.equal(seen.end.status, 'interrupted');
  assert.equal(seen.end.error, 're-attaching the pump: the replay expired and the stored response is in_progress');
  assert.equal(seen.text, written);
  assert.equal(rows(stack, id).row.body, written);
  const after = await generation(tag, (r) => r.cancels > 0);
  assert.equal(after.status, 'cancelled');
  assert.equal(after.retrieves, 1);
});

// ---------------------------------------------------------------------------------------
// Object resets: the runtime (wrangler dev and workerd, its whole process group) is killed
// with SIGKILL and restarted, while the upstream's generation runs on. A request (a reader, a
// cancel) wakes the fresh instance, which rebuilds the stream from D1 (SPEC §10) and, from the
// pump's stored record, re-attaches with `starting_after`, checking the replay against the
// durable text before it pushes past it.

/** How many times the multi-kill test kills the runtime under one answer. */
const KILLS = 3;

/** The log lines of `event` about stream `id` since the last (re)start, parsed (an error line is wrapped in colour codes). */
const logged = (event, id) =>
  stack.logs().split('\n').flatMap((line) => {
    const json = jsonOrUndefined(/\{.*\}/.exec(line)?.[0]);
    return json?.event === event && json.streamId === id ? [json] : [];
  });

/** The fresh instance's `rehydrated` line about stream `id`, once logged. */
async function rehydrated(id) {
  await stack.waitForLog(new RegExp(`"event":"rehydrated".*"streamId":"${id}"`));
  return logged('rehydrated', id)[0];
}

/** SIGKILLs the runtime; returns the durable text D1 holds then (what the next instance rebuilds). */
async function killRuntime(id) {
  await stack.kill();
  return durableFromDb(stack.db, id).text;
}

/**
 * The seeded kill plan: in each life the generation is released to a hold point (increasing),
 * either while the runtime is down (`dark`: the re-attach then replays what the object never
 * saw) or once the fresh instance re-attached; the kill comes
 *   between checkpoints      the object pushed everything up to the hold, durable wherever
 *                            the checkpoint policy left it;
 *   after a checkpoint       the same, once a checkpoint round made all of it durable;
 *   right after a re-attach  as soon as the mock sees the fresh instance's re-attach (the
 *                            replay may be anywhere), always after a dark release.
 * The first life (the create) has no re-attach.
 */
function killPlan(r, tokens) {
  const holds = new Set();
  while (holds.size < KILLS) holds.add(r.int(15, tokens - 15));
  return [...holds].sort((a, b) => a - b).map((hold, life) => {
    const points = ['between checkpoints', 'after a checkpoint', ...(life > 0 ? ['right after a re-attach'] : [])];
    const point = r.pick(points);
    return { hold, point, dark: life > 0 && (point === 'right after a re-attach' || r.chance(0.5)) };
  });
}

/** The model's text in a stream's text: itself (`text`), or its complete lines' text deltas (`ui`). */
const answerText = (format, text) =>
  format === 'text' ? text : uiChunksOf(text).filter((c) => c.type === 'text-delta').map((c) => c.delta).join('');

/** The stream text a reader from 0 has so far (its chunks). */
const readerText = (reader) => reader.frames.filter((f) => f.json?.type === 'chunk').map((f) => f.json.text).join('');

for (const format of ['text', 'ui']) {
  test(`background pump (${format}): the runtime killed ${KILLS} times mid-answer at seeded points, each fresh instance re-attaches from the stored record; the answer ends complete, created once, the text the mock's`, { timeout: 120_000 }, async (t) => {
    const seed = seedFromEnv();
    const r = rng(seed);
    t.diagnostic(`E2E_SEED=${seed} (replays the text and the kill points)`);
    console.log(`# E2E_SEED=${seed} pump-background kills (${format})`);
    const tokens = 200;
    const textSeed = r.int(1, 1_000_000);
    const all = mockTokens({ seed: textSeed, tokens });
    const expected = all.join('');
    const units = (k) => all.slice(0, k).join('').length;
    const answer = (text) => answerText(format, text);
    /** Waits until `reader` has the model's text up to token `k`. */
    const reaches = (reader, k) => reader.next(() => answer(readerText(reader)).length >= units(k), 20_000);
    const plan = killPlan(r, tokens);
    t.diagnostic(`kill plan: ${JSON.stringify(plan)}`);
    const tag = newTag(`kills-${format}`);

    // The first life: the pump creates the response.
    const id = newStream(stack, `bg-kills-${format}`);
    const s = api(stack, id);
    ok(await s.open(undefined, format), 'open');
    const readers = [await s.events(0)];
    accepted(await pump(s, backgroundPump({ tokens, rate: 0, seed: textSeed, tag, holdAt: plan[0].hold })), id);
    const durables = [];
    let durableSeq = 0; // the highest durable length seen (D1 after a kill, a rebuilt stream's)
    let resumeBy = null;
    for (let life = 0; life < KILLS; life++) {
      const { hold, point, dark } = plan[life];
      const label = `life ${life} (${point}${dark ? ', released while down' : ''})`;
      if (life > 0) {
        if (dark) {
          await control('release', tag, { until: hold });
          await generation(tag, (g) => g.textTokens === hold);
        }
        await stack.restart();
        // A deploy that comes after the previous life's resume window: the pump's resume
        // consumed that window, so this instance rebuilds the stream too.
        await until(() => Date.now() > resumeBy, `the previous life's window (${resumeBy}) passed`);
        readers.push(await s.events(0)); // wakes the fresh instance
        // Rebuilt at D1's durable length: at least what D1 showed after the kill (a commit
        // the kill cut short of SQLite's WAL index can surface when the restarted D1 recovers it).
        const rebuilt = await rehydrated(id);
        assert.ok(rebuilt.durableSeq >= durableSeq, `${label}: rebuilt at ${rebuilt.durableSeq}, below the durable length ${durableSeq} D1 held`);
        durableSeq = rebuilt.durableSeq;
        await generation(tag, (g) => g.reattaches.length === life && g.listeners === 1);
      }
      if (point !== 'right after a re-attach') {
        if (life > 0 && !dark) await control('release', tag, { until: hold });
        await reaches(readers.at(-1), hold);
        // The checkpoint policy's own round (its interval), seen in D1: no flush, which is a
        // producer's write and fenced once the pump resumed the stream.
        const checkpointed = () => answer(durableFromDb(stack.db, id).text).length >= units(hold);
        if (point === 'after a checkpoint') await until(checkpointed, `${label}: the checkpoint in D1`);
      }
      resumeBy = life > 0 ? (await rehydrated(id)).resumeBy : Date.now();
      const durable = await killRuntime(id);
      t.diagnostic(`${label}: killed at durableSeq ${durable.length}`);
      assert.ok(durable.length >= durableSeq, `${label}: durableSeq never falls (${durableSeq} → ${durable.length})`);
      durableSeq = durable.length;
      durables.push(durable);
      readers.at(-1).close();
    }

    // The last life: the generation runs to its end.
    await stack.restart();
    await until(() => Date.now() > resumeBy, `the previous life's window (${resumeBy}) passed`);
    const last = await s.events(0);
    await control('release', tag);
    const { row, chunks } = await until(() => {
      const found = rows(stack, id);
      return found.row.status === 'streaming' ? null : found;
    }, 'the row sealed', 60_000);
    assert.equal(row.status, 'complete', JSON.stringify(row));
    assert.equal(answer(row.body), expected, 'the text equals the mock\'s, nothing repeated or lost across the resets');
    assert.deepEqual(chunks, []);
    const seen = checkFrames(await untilEnd(last), { label: 'reader (after the last reset)', produced: row.body });
    assert.equal(seen.end.status, 'complete', JSON.stringify(seen.end));
    for (const [life, reader] of readers.entries()) {
      checkFrames(reader.frames, { label: `life ${life}'s reader (cut by the kill)`, produced: row.body, requireEnd: false });
    }
    for (const durable of durables) assertPrefix(durable, row.body, 'each kill\'s durable text');
    if (format === 'ui') {
      // The real `ai` package rebuilds one text part, the mock's text: no part duplicated.
      const { message, errors } = await uiMessageOf(uiChunksOf(row.body));
      assert.deepEqual(errors, []);
      assert.deepEqual(message.parts.filter((p) => p.type === 'text').map((p) => p.text), [expected]);
    }
    const done = await generation(tag);
    assert.equal(done.status, 'completed');
    const requests = await upstreamRequests(tag, done.id);
    assert.equal(requests.filter((q) => q.kind === 'create').length, 1, 'the mock recorded exactly one create: the answer was generated once');
    assert.equal(done.reattaches.length, KILLS, `one re-attach per fresh instance: ${JSON.stringify(done.reattaches)}`);
    assert.ok(done.reattaches.every((a) => !a.refused && !a.perturbed), JSON.stringify(done.reattaches));
    assert.equal(requests.filter((q) => q.kind === 'cancel').length, 0, 'a complete answer cancels nothing');
  });
}

test('background pump: after a reset, a replay that differs from the durable text ends interrupted with that text, never spliced, and cancels the response upstream', { timeout: 60_000 }, async () => {
  const [tokens, holdAt] = [160, 100];
  const { tag, id, s, reader, written } = await heldPump('reset-perturbed', { seed: 110, tokens, holdAt });
  ok(await s.flush(), 'flush'); // the durable text is all that was written
  reader.close();
  // Replays change the text from the last token written on: inside the durable text, past the
  // record's mark (at least REPLAY_OVERLAP_UNITS below the durable length, so before that token).
  await control('perturb', tag, { at: holdAt - 1 });
  assert.equal(await killRuntime(id), written);
  await stack.restart();
  const seen = checkFrames(await untilEnd(await s.events(0)), 'reader (perturbed, after a reset)');
  assert.equal(seen.end.status, 'interrupted', JSON.stringify(seen.end));
  const offset = mockTokens({ seed: 110, tokens }).slice(0, holdAt - 1).join('').length;
  assert.equal(seen.end.error, `re-attaching the pump: the replay differs from the text already written at offset ${offset} (not spliced)`);
  assert.equal(seen.text, written, 'the reader has exactly the durable text');
  const { row, chunks } = rows(stack, id);
  assert.equal(row.status, 'interrupted');
  assert.equal(row.body, written, 'the row keeps the durable text, nothing of the replay');
  assert.equal(row.error, seen.end.error);
  assert.deepEqual(chunks, []);
  const after = await generation(tag, (g) => g.cancels > 0);
  assert.equal(after.status, 'cancelled', 'the response no longer runs on for nobody');
  assert.deepEqual(after.reattaches.map((a) => a.perturbed), [true]);
  assert.equal((await upstreamRequests(tag, after.id)).filter((q) => q.kind === 'cancel').length, 1);
});

test('background pump: after a reset, an expired replay ends complete through the stored response, the whole text', { timeout: 60_000 }, async () => {
  const { tag, id, s, reader, expected } = await heldPump('reset-expired', { seed: 111, tokens: 120, holdAt: 50 });
  reader.close();
  await killRuntime(id);
  // While the runtime is down the generation completes, and then its replay expires.
  await control('release', tag);
  await generation(tag, (g) => g.status === 'completed');
  await control('expire', tag);
  await stack.restart();
  const seen = checkFrames(await untilEnd(await s.events(0)), { label: 'reader (expired, after a reset)', produced: expected });
  assert.equal(seen.end.status, 'complete', JSON.stringify(seen.end));
  assert.equal(seen.text, expected);
  const { row, chunks } = rows(stack, id);
  assert.equal(row.status, 'complete');
  assert.equal(row.body, expected);
  assert.deepEqual(chunks, []);
  const done = await generation(tag);
  assert.deepEqual(done.reattaches.map((a) => a.refused), [404], 'the re-attach was refused as expired');
  assert.equal(done.retrieves, 1, 'the stored response was read');
  const requests = await upstreamRequests(tag, done.id);
  assert.equal(requests.filter((q) => q.kind === 'create').length, 1);
  assert.equal(requests.filter((q) => q.kind === 'cancel').length, 0);
});

test('background pump: after a reset, a cancel (which wakes the fresh instance) seals cancelled and cancels the response upstream', { timeout: 60_000 }, async () => {
  const { tag, id, s, reader, written } = await heldPump('reset-cancel', { seed: 112, tokens: 150, holdAt: 30 });
  reader.close();
  const durable = await killRuntime(id);
  await stack.restart();
  ok(await s.cancel(), 'cancel');
  // The generation is held: only the upstream cancel ends it.
  const after = await generation(tag, (g) => g.cancels > 0);
  assert.equal(after.status, 'cancelled', 'the upstream generation was cancelled');
  assert.equal(after.cancels, 1);
  const cancels = (await upstreamRequests(tag, after.id)).filter((q) => q.kind === 'cancel');
  assert.equal(cancels.length, 1);
  assert.equal(cancels[0].credential, sha256(`Bearer ${KEY}`), 'the cancel carried the key, read from the secret');
  // The replay may have pushed some of the text written before the kill again before the cancel.
  const seen = checkFrames(await untilEnd(await s.events(0)), 'reader (after the cancel)');
  assert.equal(seen.end.status, 'cancelled');
  assertPrefix(durable, seen.text, 'the durable text is kept');
  assertPrefix(seen.text, written, 'nothing but the text written');
  const { row } = await until(() => {
    const found = rows(stack, id);
    return found.row.status === 'cancelled' ? found : null;
  }, 'the row sealed cancelled');
  assert.equal(row.body, seen.text);
});
