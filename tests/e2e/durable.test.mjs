// The durable plane (SPEC §5) and the stream's life after close (SPEC §6) against real D1:
// flush commits exactly the produced length, /text before and after compaction, the linger
// window, fail and cancel, and the SSE wire details (headers, retry, Last-Event-ID, ping).
import test from 'node:test';
import assert from 'node:assert/strict';
import { startStack } from './harness.mjs';
import {
  api, call, checkFrames, emojiText, newStream, ok, readWholeSse, rng, rows, seedFromEnv, splitCodePoints, until, untilEnd,
} from './util.mjs';

const LINGER_MS = 3000;
const KEEPALIVE_MS = 400;
let stack;
/** The same settings with a linger window far longer than any test: a join "within the window" is one by construction. */
let lingering;

test.before(async () => {
  // A large CHECKPOINT_CHARS and a long interval, so only flush/close commit in these tests.
  const vars = { KEEPALIVE_MS: String(KEEPALIVE_MS), CHECKPOINT_CHARS: '100000', CHECKPOINT_INTERVAL_MS: '60000' };
  [stack, lingering] = await Promise.all([
    startStack({ name: 'e2e-durable', vars: { ...vars, LINGER_MS: String(LINGER_MS) } }),
    startStack({ name: 'e2e-durable-lingering', vars: { ...vars, LINGER_MS: '600000' } }),
  ]);
});
test.after(async () => {
  await Promise.all([stack?.stop(), lingering?.stop()]);
});

/** Opens a fresh stream on `on` (default: the main stack) and appends `text` in pieces; returns the API client. */
async function produce(prefix, text, seed = 1, on = stack) {
  const id = newStream(on, prefix);
  const s = api(on, id);
  ok(await s.open(), 'open');
  let seq = 0;
  for (const p of splitCodePoints(text, rng(seed), 1, 30)) {
    const rec = ok(await s.append(p), 'append');
    seq += p.length;
    assert.equal(rec.seq, seq);
  }
  return s;
}

test('flush returns the produced UTF-16 length as seq and durableSeq, and the D1 row seq equals it', { timeout: 60_000 }, async (t) => {
  const seed = seedFromEnv();
  t.diagnostic(`seed ${seed}`);
  const produced = emojiText(rng(seed), 1500);
  const s = await produce('flush', produced);
  assert.notEqual(produced.length, Buffer.byteLength(produced), 'UTF-16 length differs from the UTF-8 length');
  assert.notEqual(produced.length, [...produced].length, 'UTF-16 length differs from the code point count');
  const before = rows(stack, s.id);
  assert.equal(before.row.seq, 0, 'nothing committed before the flush (checkpoints are far away in this stack)');

  const f = ok(await s.flush(), 'flush');
  assert.equal(f.durableSeq, produced.length, 'flush durableSeq');
  assert.equal(f.seq, produced.length, 'flush seq');
  const { row, chunks } = rows(stack, s.id);
  assert.equal(row.seq, produced.length, 'D1 row seq');
  assert.equal(row.status, 'streaming');
  assert.ok(chunks.map((c) => c.text).join('') === produced, 'the chunk rows hold the produced text');
  assert.equal(chunks.at(-1).seq, produced.length, 'the last chunk row ends at the produced length');

  // A second flush with nothing new resolves at once with the same answer and writes nothing.
  const again = ok(await s.flush(), 'second flush');
  assert.deepEqual({ seq: again.seq, durableSeq: again.durableSeq }, { seq: produced.length, durableSeq: produced.length });
  assert.equal(rows(stack, s.id).chunks.length, chunks.length);

  // More text, flush again: the row advances to the new length.
  ok(await s.append('🇺🇳 +tail'), 'append');
  const third = ok(await s.flush(), 'third flush');
  assert.equal(third.durableSeq, produced.length + '🇺🇳 +tail'.length);
  assert.equal(rows(stack, s.id).row.seq, third.durableSeq);
  const stats = ok(await s.stats(), 'stats');
  for (const k of ['seq', 'durableSeq', 'readers', 'checkpoints', 'failures', 'retries', 'bytesWritten']) {
    assert.equal(typeof stats[k], 'number', `stats.${k}: ${JSON.stringify(stats)}`);
  }
  assert.ok(stats.checkpoints >= 2 && stats.bytesWritten >= Buffer.byteLength(produced), JSON.stringify(stats));
  assert.equal(stats.durableSeq, third.durableSeq);
  assert.equal(stats.seq, third.durableSeq);
  ok(await s.close(), 'close');
});

test('/text is the produced text before close (body + chunk rows) and after close (compacted)', { timeout: 60_000 }, async (t) => {
  const seed = seedFromEnv();
  t.diagnostic(`seed ${seed}`);
  const produced = emojiText(rng(seed), 2000);
  const half = splitCodePoints(produced, rng(7), 900, 1100)[0];
  const id = newStream(stack, 'text');
  const s = api(stack, id);
  ok(await s.open(), 'open');

  // Before anything is durable /text is empty (a prefix, never more than committed).
  ok(await s.append(half), 'append half');
  const early = ok(await s.text(), '/text');
  assert.deepEqual(early, { text: '', seq: 0, status: 'streaming', format: 'text' });

  ok(await s.flush(), 'flush 1');
  ok(await s.append(produced.slice(half.length)), 'append rest');
  ok(await s.flush(), 'flush 2');

  const { row, chunks } = rows(stack, id);
  assert.ok(chunks.length >= 2, `chunk rows exist before close (${chunks.length})`);
  assert.equal(row.body, '', 'nothing compacted yet');
  assert.equal(row.status, 'streaming');
  const live = ok(await s.text(), '/text before close');
  assert.equal(live.status, 'streaming');
  assert.equal(live.seq, produced.length);
  assert.ok(live.text === produced, '/text before close == produced');

  const closed = ok(await s.close(), 'close');
  assert.deepEqual(closed, { status: 'complete', seq: produced.length, durableSeq: produced.length });
  const after = rows(stack, id);
  assert.equal(after.chunks.length, 0, 'chunk rows are gone after close');
  assert.equal(after.row.status, 'complete');
  assert.equal(after.row.seq, produced.length, 'row seq is the UTF-16 length');
  assert.ok(after.row.body === produced, 'the body is the produced text');
  assert.equal(after.row.error, null);
  const sealed = ok(await s.text(), '/text after close');
  assert.deepEqual(sealed, { text: produced, seq: produced.length, status: 'complete', format: 'text' });
});

test('/text for a stream with no message row is 404 no_row', { timeout: 60_000 }, async () => {
  const s = api(stack, 'text-no-such-row');
  const res = await s.text();
  assert.equal(res.status, 404, res.raw);
  assert.equal(res.json.error, 'no_row');
});

test('a reader joining within the linger window gets the tail and end', { timeout: 30_000 }, async () => {
  const produced = `linger ${emojiText(rng(3), 300)}`;
  const s = await produce('linger', produced, 1, lingering);
  const early = await s.events(0); // attached (its open frame arrived) before close: gets end live
  const closed = ok(await s.close(), 'close');
  assert.equal(closed.seq, produced.length);

  // After close, from the middle: tail + end, and the server ends the body (read whole).
  const f = 10;
  const late = await readWholeSse(s.eventsUrl(f), 15_000);
  assert.equal(late.status, 200);
  assert.equal(late.frames[0].retry, 1000, 'retry first');
  const got = checkFrames(late.frames, 'late reader');
  assert.deepEqual(got.open, { type: 'open', streamId: s.id, from: f, seq: produced.length, durableSeq: produced.length, ended: true });
  assert.equal(got.text, produced.slice(f), 'the tail from f');
  assert.deepEqual(got.durables, [produced.length]);
  assert.deepEqual(got.end, { type: 'end', seq: produced.length, status: 'complete' });
  assert.equal(late.frames.filter((x) => x.data !== undefined).at(-1).json.type, 'end', 'end is the last frame');

  // Joining at the end, still within the window: no text, just end.
  const mid = await readWholeSse(s.eventsUrl(produced.length), 15_000);
  const midGot = checkFrames(mid.frames, 'mid-linger reader');
  assert.equal(midGot.text, '', 'joining at the end replays no text');
  assert.equal(midGot.end?.status, 'complete');

  const earlyGot = checkFrames(await untilEnd(early, 15_000), 'early reader');
  assert.ok(earlyGot.text === produced);
  assert.equal(earlyGot.end.seq, produced.length);
});

test('once the object let go of a finished stream (it slept after the seal), a join gets the same tail and end from the row; /text has the text', { timeout: 60_000 }, async () => {
  const produced = `gone ${emojiText(rng(4), 100)}`;
  const s = await produce('after-linger', produced);
  ok(await s.close(), 'close');
  const lingering = await readWholeSse(s.eventsUrl(3), 15_000);
  checkFrames(lingering.frames, 'a join while the stream is held');
  const frames = (r) => r.frames.filter((f) => f.data !== undefined).map((f) => [f.id, f.data]);
  // No timer keeps a finished answer's object awake: the runtime evicts it (about 10 s idle),
  // and the next instance holds no stream (its /stats say not_open).
  await until(async () => (await s.stats()).status === 404 || undefined, 'the object let go of the stream', 60_000);
  const fromRow = await readWholeSse(s.eventsUrl(3), 15_000);
  assert.equal(fromRow.frames[0].retry, 1000, 'retry first');
  checkFrames(fromRow.frames, 'a join from the row');
  assert.deepEqual(frames(fromRow), frames(lingering), 'the same frames, ids and all');
  assert.ok(fromRow.frames.every((f) => f.json?.type !== 'absent'), 'never absent for a finished answer');
  // The durable text is the same.
  assert.equal(ok(await s.text(), '/text').text, produced);
});

test('fail seals the stream with status error: readers get end with the error, the row records it', { timeout: 60_000 }, async () => {
  const s = await produce('fail', 'partial answer 🙈');
  const reader = await s.events(0);
  const res = ok(await s.fail('upstream model timed out'), 'fail');
  assert.equal(res.status, 'error');
  assert.equal(res.seq, 'partial answer 🙈'.length);
  const got = checkFrames(await untilEnd(reader, 15_000), 'reader');
  assert.deepEqual(got.end, { type: 'end', seq: 'partial answer 🙈'.length, status: 'error', error: 'upstream model timed out' });
  const { row, chunks } = rows(stack, s.id);
  assert.equal(row.status, 'error');
  assert.equal(row.error, 'upstream model timed out');
  assert.equal(row.body, 'partial answer 🙈');
  assert.equal(chunks.length, 0);
  // A stream seals once: a second close or fail gets the first seal's outcome and changes nothing.
  const again = ok(await s.close(), 'close after fail');
  assert.equal(again.status, 'error');
  assert.equal(rows(stack, s.id).row.status, 'error');
});

test('cancel reaches the producer on its next append, and close then seals cancelled', { timeout: 60_000 }, async () => {
  const s = await produce('cancel', 'abc');
  const c = ok(await s.cancel(), 'cancel');
  assert.ok(c, 'cancel answers JSON');
  assert.equal(rows(stack, s.id).row.cancel, 1, 'the row cancel flag is set');
  const rec = ok(await s.append('d'), 'append after cancel');
  assert.equal(rec.cancelled, true);
  const closed = ok(await s.close(), 'close');
  assert.equal(closed.status, 'cancelled');
  assert.equal(rows(stack, s.id).row.status, 'cancelled');
});

test('SSE wire: headers, retry first, open/chunk ids only, Last-Event-ID wins over from, bad from means 0, : ping when idle', { timeout: 60_000 }, async () => {
  const s = await produce('wire', 'hello 🌍 world');
  // Raw bytes: the body starts with the retry line.
  const res = await fetch(s.eventsUrl(0));
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'text/event-stream; charset=utf-8');
  assert.equal(res.headers.get('cache-control'), 'no-cache, no-transform');
  assert.equal(res.headers.get('x-accel-buffering'), 'no');
  const rd = res.body.getReader();
  let raw = '';
  const dec = new TextDecoder();
  while (!raw.includes('"type":"chunk"')) {
    const { value, done } = await rd.read();
    if (done) break;
    raw += dec.decode(value, { stream: true });
  }
  await rd.cancel();
  assert.ok(raw.startsWith('retry: 1000\n'), `body starts with retry: ${JSON.stringify(raw.slice(0, 40))}`);
  assert.match(raw, /\nid: 0\ndata: \{"type":"open"/);
  assert.match(raw, /\nid: 14\ndata: \{"type":"chunk","from":0,"seq":14,"text":"hello 🌍 world"\}\n\n/);

  // Last-Event-ID wins over ?from=.
  const resumed = await s.events(0, { headers: { 'last-event-id': '6' } });
  const open = (await resumed.next()).json;
  assert.equal(open.from, 6);
  assert.equal((await resumed.next()).json.text, '🌍 world');

  // A missing, negative or non-numeric from means 0.
  for (const bad of ['-5', 'abc', '1e3', '']) {
    const r = await s.events(bad);
    assert.equal((await r.next()).json.from, 0, `from=${JSON.stringify(bad)}`);
    r.close();
  }

  // Idle: a `: ping` comment every KEEPALIVE_MS.
  const ping = await resumed.next((f) => f.comment !== undefined, KEEPALIVE_MS * 25);
  assert.equal(ping.comment, 'ping');
  // And after the pings, live frames still flow.
  ok(await s.append('!'), 'append');
  const live = await resumed.next((f) => f.json?.type === 'chunk');
  assert.deepEqual(live.json, { type: 'chunk', from: 14, seq: 15, text: '!' });
  assert.equal(live.id, '15');
  // And idle again after a live frame, it is pinged again: the interval restarts at every
  // write, whichever write it was.
  const again = await resumed.next((f) => f.comment !== undefined, KEEPALIVE_MS * 25);
  assert.equal(again.comment, 'ping');
  resumed.close();
  ok(await s.close(), 'close');
});

test('the open meta body is accepted, and a bad open body is 400 bad_json', { timeout: 60_000 }, async () => {
  const id = newStream(stack, 'meta');
  const s = api(stack, id);
  const bad = await call(s.url('open'), { method: 'POST', headers: { authorization: `Bearer ${s.token}` }, body: '{"meta": ' });
  assert.equal(bad.status, 400, bad.raw);
  assert.equal(bad.json.error, 'bad_json');
  assert.equal(rows(stack, id).row.status, 'pending', 'a refused body touches nothing');
  const res = ok(await s.open({ model: 'x', n: 1 }), 'open with meta');
  assert.deepEqual(res, { streamId: id, seq: 0, durableSeq: 0, epoch: 1 }, 'the first producer epoch (SPEC §10)');
  ok(await s.close(), 'close');
});
