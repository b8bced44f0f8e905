// Surviving the object (SPEC §10), over raw HTTP against the real runtime: the runtime's whole
// process group is killed with SIGKILL mid-answer and restarted (once for most cases: each starts
// before the kill and is checked after it), then twice more for a reset right after a resume.
//
// - text: a producer that resumes after the restart continues exactly from the rehydrated
//   `seq = durableSeq`, and the row ends `complete` with exactly the produced text, no chunk rows;
//   a write before the resume is 409 `resume_required`; a resume without an epoch (a caller that
//   wrote nothing) is refused `superseded`; two connections holding the epoch resume at once:
//   exactly one is granted, the other is 409 `superseded`, at its resume and at its first append,
//   nothing of it interleaved;
// - a reader whose offset lies past the rehydrated seq is parked, then served from exactly its
//   offset once the re-sent text reaches it (no clamped replay, no `absent`);
// - ui: the resume answers a line end (the unfinished line the old instance held is re-sent);
// - a cancel in the gap seals `cancelled`, and the resume answers 409 `closed` naming it;
// - a producer that dies with the object (never returns): the alarm rehydrates, and the row is
//   sealed `interrupted` with its durable prefix no sooner than the window after the runtime came
//   back, by the window's own expiry (its error says so);
// - a resume of a sealed stream: 409 `closed` naming `complete`;
// - a Stop accepted just before a reset (the producer busy between writes, its watch's answer
//   lost with the object) reaches the producer when it comes back, raw HTTP and producer.js
//   alike: the resume is refused `closed`/`cancelled`, or every write after it answers
//   `cancelled`, and the row ends `cancelled`, never `complete`;
// - an idle producer's window counts from its last write, not from the open;
// - a retried invocation whose open is lost in a reset (producer.js) never takes the answer over
//   from the producer that holds it: its resume is refused `superseded`, and the row ends with
//   exactly the first producer's answer.
import test from 'node:test';
import assert from 'node:assert/strict';
import { objectStorage, startStack, readSse } from './harness.mjs';
import { openStream } from '../../public/producer.js';
import { api, durableFromDb, isError, newStream, ok, rng, rows, seedFromEnv, emojiText, insidePair, ndjson, until, withTimeout } from './util.mjs';

/** `i` moved off the inside of a surrogate pair of `s`. */
const cutAt = (s, i) => (insidePair(s, i) ? i - 1 : i);

const LEASE_MS = 1500;
const WINDOW_MS = 5000;
/** How long the runtime stays down after the kill, before the new one starts. */
const DOWN_MS = 3000;

let stack;
test.before(async () => {
  stack = await startStack({
    name: 'e2e-survival',
    // The idle timeout below the window: a rebuilt stream waits the larger of the two, so here
    // the window (the tests of the idle producer's longer wait are in eviction.test.mjs).
    vars: {
      LEASE_MS: String(LEASE_MS),
      RESUME_WINDOW_MS: String(WINDOW_MS),
      IDLE_TIMEOUT_MS: String(WINDOW_MS - 1000),
      CHECKPOINT_CHARS: '64',
      CHECKPOINT_INTERVAL_MS: '60000',
    },
  });
});
test.after(async () => {
  await stack?.stop();
});

/** A producer call carrying `epoch` (no header when undefined) and naming `producer` (none when undefined). */
function write(c, action, body, epoch, producer) {
  const headers = { authorization: `Bearer ${c.token}`, 'content-type': 'text/plain; charset=utf-8' };
  if (epoch !== undefined) headers['x-rindle-epoch'] = String(epoch);
  if (producer !== undefined) headers['x-rindle-producer'] = producer;
  return fetch(c.url(action), { method: 'POST', headers, body }).then(async (res) => {
    const raw = await res.text();
    let json;
    try {
      json = JSON.parse(raw);
    } catch {}
    return { status: res.status, headers: res.headers, raw, json };
  });
}

/**
 * A resume: with the caller's epoch, or (undefined) none, as a producer whose open's answer was
 * lost (granted only a stream held for its `producer` id, or one nothing was written to).
 */
const resume = (c, epoch, producer) => write(c, 'resume', undefined, epoch, producer);

test('a reset mid-answer: rehydration, resume, the fence, parked readers, the window, a cancel in the gap', async () => {
  const seed = seedFromEnv();
  console.log(`survival: E2E_SEED=${seed}`);
  const r = rng(seed);

  // text: a durable prefix, then a live tail the old instance lost.
  const text = api(stack, newStream(stack, 'surv-text'));
  ok(await text.open());
  const produced = emojiText(r, 400);
  const cut = 150 + Math.floor(r() * 100);
  const head = produced.slice(0, cutAt(produced, cut));
  ok(await text.append(head));
  const flushed = ok(await text.flush());
  const tail = produced.slice(head.length, cutAt(produced, head.length + 60));
  const liveSeq = ok(await text.append(tail)).seq;
  assert.equal(liveSeq, head.length + tail.length);
  const confirmedDurable = flushed.durableSeq;

  // ui: complete lines durable, one more line and a fragment only live.
  const ui = api(stack, newStream(stack, 'surv-ui'));
  ok(await ui.open(undefined, 'ui'));
  const lines = ['start', 'a 😀', 'b 👩‍👩‍👧', 'c 🇯🇵', 'd 流式', 'e'].map((delta, i) => (i === 0 ? { type: 'start' } : { type: 'text-delta', id: 't', delta }));
  const uiText = ndjson([...lines, { type: 'finish' }]);
  const uiDurable = ndjson(lines.slice(0, 3));
  ok(await write(ui, 'append', uiDurable));
  ok(await ui.flush());
  ok(await write(ui, 'append', ndjson(lines.slice(3, 4)) + '{"type":"text-de'));

  // cancel in the gap; a producer that never returns; a stream sealed before the reset.
  const gap = api(stack, newStream(stack, 'surv-gap'));
  ok(await gap.open());
  ok(await gap.append('saved before the reset'));
  ok(await gap.flush());
  const gone = api(stack, newStream(stack, 'surv-gone'));
  ok(await gone.open());
  ok(await gone.append('kept 😀'));
  ok(await gone.flush());
  ok(await gone.append(' lost'));
  const sealed = api(stack, newStream(stack, 'surv-sealed'));
  ok(await sealed.open());
  ok(await sealed.append('done'));
  ok(await sealed.close());

  await stack.kill();
  // The runtime stays down a while (a deploy's gap): a window counted from the reset rather than
  // from the rebuild would end that much too early. The new instance can see the reset only once
  // it runs, so the window's lower bound is measured from its start.
  const killedAt = Date.now();
  await until(() => Date.now() - killedAt >= DOWN_MS, 'the runtime to stay down for its gap');
  const restarted = Date.now();
  await stack.restart();
  // Watched from now on: when the window seals the stream nobody resumes.
  const goneSealedAt = until(() => durableFromDb(stack.db, gone.id).row.status !== 'streaming', 'the window to seal the abandoned stream', WINDOW_MS + 2 * LEASE_MS + 10_000).then(
    () => Date.now(),
  );

  // The producer's first write after the reset: the stream was rebuilt and waits for its resume.
  const required = isError(await write(text, 'append', 'x'), 409, 'resume_required', 'a write before the resume');
  const d = required.seq;
  assert.equal(required.durableSeq, d);
  assert.ok(d >= confirmedDurable, `P: the rehydrated seq ${d} is at least the confirmed durableSeq ${confirmedDurable}`);
  assert.equal(durableFromDb(stack.db, text.id).text, produced.slice(0, d), 'the rehydrated seq is the durable text');

  // A reader at the old live seq, past the rehydrated text: parked.
  const parked = await readSse(text.eventsUrl(liveSeq));
  assert.equal(parked.status, 200);

  // A producer without the epoch (an invocation whose open's answer it never got) is refused:
  // the stream has text it did not write.
  isError(await resume(text, undefined, 'a-stranger'), 409, 'superseded', 'a resume without an epoch, past what its caller wrote');
  // Two connections holding epoch 1 resume at once: exactly one is granted, the other fenced.
  const [one, two] = await Promise.all([resume(text, 1, 'conn-a'), resume(text, 1, 'conn-b')]);
  const granted = [one, two].filter((r) => r.status === 200).map((r) => r.json);
  assert.equal(granted.length, 1, `exactly one resume is granted: ${one.raw} / ${two.raw}`);
  isError([one, two].find((r) => r.status !== 200), 409, 'superseded', 'the other connection');
  assert.deepEqual([granted[0].seq, granted[0].durableSeq, granted[0].format, granted[0].epoch], [d, d, 'text', 2]);
  isError(await write(text, 'append', 'FENCED', 1), 409, 'superseded', 'the fenced producer');
  isError(await write(text, 'append', 'FENCED'), 409, 'superseded', 'no epoch once a resume happened');
  isError(await write(text, 'append', 'x', 'two'), 400, 'bad_epoch');
  assert.equal(parked.frames.filter((f) => f.data !== undefined).length, 0, 'the parked reader got nothing yet');

  // The winner re-sends from the returned seq and finishes.
  const rest = produced.slice(d);
  const mid = Math.floor(rest.length / 2);
  const safeMid = cutAt(rest, mid);
  ok(await write(text, 'append', rest.slice(0, safeMid), 2));
  ok(await write(text, 'append', rest.slice(safeMid), 2));
  assert.equal(ok(await write(text, 'close', undefined, 2)).status, 'complete');
  const final = durableFromDb(stack.db, text.id);
  assert.equal(final.row.status, 'complete');
  assert.equal(final.text, produced, 'S: exactly the produced text');
  assert.equal(final.chunks.length, 0, 'compacted');

  await withTimeout(parked.next((f) => f.json?.type === 'end'), 10_000, 'the parked reader to end');
  parked.close();
  const frames = parked.frames.filter((f) => f.data !== undefined).map((f) => f.json);
  assert.equal(frames[0].type, 'open');
  assert.equal(frames[0].from, liveSeq, 'served from exactly its offset');
  const seen = frames.filter((f) => f.type === 'chunk').map((f) => f.text).join('');
  assert.equal(seen, produced.slice(liveSeq), 'no seam: exactly the text after its offset');

  // ui: the resume answers the durable line end; the rest is re-sent from there.
  const uiGrant = ok(await resume(ui, 1));
  assert.equal(uiGrant.format, 'ui');
  assert.equal(uiGrant.seq, uiDurable.length, 'a line end');
  ok(await write(ui, 'append', uiText.slice(uiGrant.seq), uiGrant.epoch));
  ok(await write(ui, 'close', undefined, uiGrant.epoch));
  assert.equal(durableFromDb(stack.db, ui.id).text, uiText);

  // A cancel in the gap: cancelled, and the resume learns it.
  ok(await gap.cancel());
  await until(() => durableFromDb(stack.db, gap.id).row.status === 'cancelled', 'the gap stream to be sealed cancelled', 10_000);
  const closed = isError(await resume(gap, 1), 409, 'closed', 'resume after a cancel in the gap');
  assert.equal(closed.status, 'cancelled');
  assert.equal(durableFromDb(stack.db, gap.id).text, 'saved before the reset');

  // Sealed before the reset: 409 naming its status.
  assert.equal(isError(await resume(sealed, 1), 409, 'closed', 'resume of a sealed stream').status, 'complete');

  // The producer died with the object (nobody came back for `gone`): the alarm rehydrated it,
  // and the window sealed it `interrupted` (not the lease at once), with its durable prefix.
  const sealedAt = await goneSealedAt;
  console.log(`survival: the abandoned stream sealed ${sealedAt - restarted} ms after the new runtime started`);
  const abandoned = durableFromDb(stack.db, gone.id);
  assert.equal(abandoned.row.status, 'interrupted');
  assert.match(abandoned.row.error, new RegExp(`did not resume within ${WINDOW_MS} ms`));
  assert.equal(abandoned.text, 'kept 😀', 'the durable prefix is kept, the live tail is not');
  assert.ok(sealedAt - restarted >= WINDOW_MS, `sealed ${sealedAt - restarted} ms after the new runtime started: the window was waited for`);
  // Sealed by the window's own expiry, not later by something else: the error above is written
  // only by the rebuilt stream's window (its timer), never by the lease's repair or a reseal.
  // That it came at all is the watch's bound (the window plus two leases plus 10 s: a hang, not
  // a latency); no wall-clock upper bound, which a loaded machine can miss.
});

test('resume on a live stream answers its own seq and fences the connection it replaces', async () => {
  const c = api(stack, newStream(stack, 'surv-live'));
  const opened = ok(await c.open());
  assert.equal(opened.epoch, 1);
  ok(await c.append('ab😀'));
  const grant = ok(await resume(c, 1));
  assert.deepEqual([grant.seq, grant.epoch], [4, 2]);
  isError(await write(c, 'append', 'x', 1), 409, 'superseded');
  ok(await write(c, 'append', 'c', 2));
  const stats = ok(await c.stats());
  assert.deepEqual([stats.epoch, stats.rehydrated], [2, false]);
  // An empty plain append (the helpers' first write after a resume with nothing to re-send)
  // answers at once where the stream stands, and says closed once it is sealed.
  assert.equal(ok(await write(c, 'append', '', 2)).seq, 5);
  ok(await write(c, 'close', undefined, 2));
  assert.equal(durableFromDb(stack.db, c.id).text, 'ab😀c');
  isError(await write(c, 'append', '', 2), 409, 'closed', 'an empty append after the seal');
  isError(await resume(api(stack, newStream(stack, 'surv-never'))), 404, 'not_open');
});

test('two connections resume at once after a reset, then append at once: exactly one is granted and continues, the other gets 409 superseded, nothing interleaved', async () => {
  const c = api(stack, newStream(stack, 'surv-race'));
  ok(await c.open());
  const head = 'durable 😀 ';
  ok(await c.append(head));
  ok(await c.flush());
  ok(await c.append('lost with the instance'));
  await stack.kill();
  await stack.restart();

  // Two connections holding the open's epoch (a producer and a copy of it that learned the
  // epoch) resume together: one is granted the stream, the other is fenced at once.
  const asked = await Promise.all([resume(c, 1, 'conn-a'), resume(c, 1, 'conn-b')]);
  const won = asked.findIndex((r) => r.status === 200);
  assert.ok(won >= 0, `one resume is granted: ${asked.map((r) => r.raw).join(' / ')}`);
  isError(asked[1 - won], 409, 'superseded', 'the other resume');
  assert.deepEqual([asked[won].json.seq, asked[won].json.epoch], [head.length, 2], 'resumed at the rehydrated seq');
  // Each goes on as if it held the stream (the loser with the epoch it had), both at once.
  const grants = asked.map((r) => (r.status === 200 ? r.json : { epoch: 1 }));

  // Each sends its own continuation in pieces, both at once; a refused producer stops, as the
  // helpers do.
  const versions = [['A1 流式 ', 'A2 👩‍👩‍👧 ', 'A3 🇯🇵'], ['B1 テキスト ', 'B2 👍🏽 ', 'B3 end']];
  const continueWith = async (grant, pieces) => {
    const answers = [];
    for (const piece of pieces) {
      answers.push(await write(c, 'append', piece, grant.epoch));
      if (answers.at(-1).status !== 200) break;
    }
    return answers;
  };
  const outcomes = await Promise.all(grants.map((g, i) => continueWith(g, versions[i])));
  const continued = outcomes.map((answers) => answers.length === 3 && answers.every((a) => a.status === 200));
  assert.equal(continued.filter(Boolean).length, 1, `exactly one continues: ${JSON.stringify(outcomes.map((o) => o.map((a) => a.status)))}`);
  const winner = continued.indexOf(true);
  const loser = 1 - winner;
  assert.equal(winner, won, 'the granted resume owns the stream');
  assert.equal(outcomes[loser].length, 1, 'the other is refused at its first append');
  isError(outcomes[loser][0], 409, 'superseded', 'the other producer');

  ok(await write(c, 'close', undefined, grants[winner].epoch));
  const final = durableFromDb(stack.db, c.id);
  assert.equal(final.row.status, 'complete');
  assert.equal(final.text, head + versions[winner].join(''), 'exactly the winner\'s text after the durable prefix: nothing of the other interleaved');
});

test('a second reset right after a resume: the fence and the new epoch survive it, and the producer resumes again', async () => {
  const c = api(stack, newStream(stack, 'surv-twice'));
  ok(await c.open());
  ok(await c.append('first 😀 '));
  ok(await c.flush());
  ok(await c.append('lost with the first instance'));
  await stack.kill();
  await stack.restart();
  const first = ok(await resume(c, 1));
  assert.deepEqual([first.seq, first.epoch], [9, 2]);
  ok(await write(c, 'append', 'second 👍🏽 ', 2));
  await stack.kill(); // right after the resume: nothing of it durable yet but the epoch
  await stack.restart();
  // The producer the first resume replaced (epoch 1) stays fenced across the reset: told
  // `superseded`, never `resume_required`, and its resume cannot take the stream back.
  isError(await write(c, 'append', 'x', 1), 409, 'superseded', 'the replaced producer after the reset');
  isError(await resume(c, 1), 409, 'superseded', 'the replaced producer\'s resume after the reset');
  isError(await write(c, 'append', 'x', 2), 409, 'resume_required', 'the rebuilt stream waits for a resume again');
  const second = ok(await resume(c, 2));
  assert.equal(second.epoch, 3, 'the epoch the first resume stored survived the reset');
  assert.ok(second.seq >= first.seq, 'P: durableSeq never falls');
  isError(await write(c, 'append', 'stale', 2), 409, 'superseded');
  const produced = 'first 😀 second 👍🏽 third';
  ok(await write(c, 'append', produced.slice(second.seq), 3));
  ok(await write(c, 'close', undefined, 3));
  assert.equal(durableFromDb(stack.db, c.id).text, produced);
});

/** The object holding stream `id`: its file (found while it stores `streamId`), and then its
 * keys now (`{}` once its file is gone; `null` while it cannot be read, mid-write). */
async function objectOf(id) {
  const hit = await until(
    () => objectStorage(stack.persistDir).find((o) => o.keys?.streamId?.includes(Buffer.from(id))),
    `the object of ${id} to store its stream id while the stream lives`,
  );
  return () => {
    const now = objectStorage(stack.persistDir).find((o) => o.file === hit.file);
    return now ? now.keys : {};
  };
}

test('a finished answer leaves nothing in its object\'s storage, and a late /ui still reads it from the row', async () => {
  const text = api(stack, newStream(stack, 'surv-forget-text'));
  const ui = api(stack, newStream(stack, 'surv-forget-ui'));
  ok(await text.open());
  ok(await ui.open(undefined, 'ui'));
  const keysOf = { text: await objectOf(text.id), ui: await objectOf(ui.id) };
  // The lease's keys carry what a revival needs from before the mark: the format and meta.
  const uiKeys = await until(() => keysOf.ui(), 'the ui object\'s keys');
  assert.ok('format' in uiKeys && 'streamId' in uiKeys && 'hostToken' in uiKeys, JSON.stringify(Object.keys(uiKeys)));
  ok(await text.append('forgotten 😀'));
  ok(await ui.append(ndjson([{ type: 'start' }, { type: 'text-delta', id: 't', delta: 'kept in the row 👍🏽' }])));
  ok(await text.close());
  ok(await ui.close());
  // The next alarm (a lease later) finds each stream sealed and releases: every key goes, and
  // the alarm with them. (Before, 4-6 keys stayed per answer, for ever.)
  for (const [name, keys] of Object.entries(keysOf)) {
    await until(() => {
      const now = keys();
      return now !== null && Object.keys(now).length === 0;
    }, () => `the ${name} stream's object to forget its keys: ${JSON.stringify(Object.keys(keys() ?? {}))}`, LEASE_MS * 4 + 5000);
  }
  // A late reader in a fresh instance (no stream held, no keys): /text and /ui read the row,
  // whose format column the open wrote.
  await stack.kill();
  await stack.restart();
  assert.equal(ok(await text.text()).text, 'forgotten 😀');
  const res = await fetch(ui.uiUrl(0));
  assert.equal(res.status, 200, 'a ui stream, known from its row');
  const body = await res.text();
  assert.match(body, /kept in the row 👍🏽/);
  assert.match(body, /data: \[DONE\]/);
  assert.equal(Object.keys(await until(() => keysOf.ui(), 'the ui object\'s keys')).length, 0, 'reading it stored nothing');
});

test('an idle producer whose object is evicted mid-pause is rebuilt, waits past the resume window, then continues to complete', async () => {
  // The idle timeout far above the resume window: a rebuilt stream waits what is left of it.
  const window = 2000;
  await stack.restart({ vars: { RESUME_WINDOW_MS: String(window), IDLE_TIMEOUT_MS: '30000' } });
  const c = api(stack, newStream(stack, 'surv-idle'));
  const opened = ok(await c.open());
  const head = 'calling a tool 🛠️ ';
  ok(await write(c, 'append', head, opened.epoch));
  ok(await write(c, 'flush', undefined, opened.epoch));
  const host = rows(stack, c.id).row.host;
  // The producer pauses (a long tool call, no readers); the object is evicted meanwhile: the
  // runtime is killed and comes back, and the lease alarm rebuilds the stream (it claims the row).
  await stack.kill();
  await stack.restart();
  await until(() => rows(stack, c.id).row.host !== host, 'the alarm to rebuild the stream (its claim of the row)', LEASE_MS * 4 + 10_000);
  const rebuiltAt = Date.now();
  // The pause goes on past the resume window (twice over): the stream still waits, because the
  // producer's absence is measured, not the instance's.
  await until(() => Date.now() - rebuiltAt > 2 * window, 'the producer\'s pause to outlast the resume window');
  assert.equal(rows(stack, c.id).row.status, 'streaming', 'not sealed when the resume window passed');
  // The producer comes back: told to resume, it resumes with its epoch and goes on.
  isError(await write(c, 'append', 'x', opened.epoch), 409, 'resume_required', 'the first write after the pause');
  const grant = ok(await resume(c, opened.epoch));
  assert.equal(grant.seq, head.length, 'the flushed text survived');
  ok(await write(c, 'append', 'and the answer.', grant.epoch));
  ok(await write(c, 'close', undefined, grant.epoch));
  const final = durableFromDb(stack.db, c.id);
  assert.deepEqual([final.row.status, final.text], ['complete', `${head}and the answer.`]);
});

test('a Stop accepted just before a reset reaches the producer when it comes back: raw HTTP with its epoch, and producer.js', async () => {
  await stack.restart();
  // A raw HTTP producer: opens, writes `abc`, flushes, then is busy between writes (a tool call).
  const raw = api(stack, newStream(stack, 'surv-stop-raw'));
  const opened = ok(await raw.open());
  ok(await write(raw, 'append', 'abc', opened.epoch));
  ok(await write(raw, 'flush', undefined, opened.epoch));
  // producer.js, its watch off: the watch's answer to the cancel is what a reset can lose (its
  // connection dies with the object), so the producer learns nothing until it writes again.
  const helperId = newStream(stack, 'surv-stop-helper');
  const helper = await openStream({ baseUrl: stack.baseUrl, streamId: helperId, token: stack.token(helperId), watch: false, resume: { timeoutMs: 30_000 } });
  await helper.append('abc');
  await helper.flush();
  // A reader presses Stop on both: accepted while the stream is live.
  for (const id of [raw.id, helperId]) {
    const cancelled = ok(await api(stack, id).cancel());
    assert.deepEqual([cancelled.cancelled, cancelled.live], [true, true], `the cancel of ${id} was accepted live`);
  }
  // A deploy: the runtime is reset before either producer writes again.
  await stack.kill();
  await stack.restart();

  // The raw producer comes back with its epoch: refused `closed`/`cancelled`, or granted with
  // every write after it answering `cancelled`.
  const resumed = await resume(raw, opened.epoch);
  if (resumed.status === 200) {
    const after = ok(await write(raw, 'append', 'def', resumed.json.epoch), 'the append after the resume');
    assert.equal(after.cancelled, true, `the write after the resume answers cancelled: ${resumed.raw} then ${JSON.stringify(after)}`);
    await write(raw, 'close', undefined, resumed.json.epoch);
  } else {
    assert.equal(isError(resumed, 409, 'closed', 'the resume after a Stop').status, 'cancelled');
  }
  const rawRow = durableFromDb(stack.db, raw.id);
  assert.equal(rawRow.row.status, 'cancelled', `the raw producer's row (${rawRow.text})`);
  assert.ok(!rawRow.text.includes('def'), 'nothing written after the Stop');

  // producer.js writes again: it learns the Stop (its signal fires, the write resolves cancelled).
  const wrote = await helper.append('def').then((v) => v, (err) => err);
  assert.equal(helper.signal.aborted, true, `the helper's signal fired (the write gave ${JSON.stringify(wrote?.message ?? wrote)})`);
  await helper.close().catch(() => {});
  const helperRow = durableFromDb(stack.db, helperId);
  assert.equal(helperRow.row.status, 'cancelled', `producer.js's row (${helperRow.text})`);
  assert.ok(!helperRow.text.includes('def'), 'nothing written after the Stop');
});

test('an idle producer reset right after its pause waits its whole idle timeout from its last write, not from the open', async () => {
  // The last write comes well after the open, and the reset follows it at once (before a lease
  // renewal could store it): the window must count from the last write.
  const idle = 12_000;
  const sinceOpen = 6000;
  await stack.restart({ vars: { RESUME_WINDOW_MS: '1000', IDLE_TIMEOUT_MS: String(idle) } });
  const c = api(stack, newStream(stack, 'surv-idle-last'));
  const openedAt = Date.now();
  const opened = ok(await c.open());
  // The producer writes on for a while after the open (each piece a write), then pauses.
  let written = '';
  for (let i = 0; Date.now() - openedAt < sinceOpen; i++) {
    const piece = `piece ${i} `;
    ok(await write(c, 'append', piece, opened.epoch));
    written += piece;
    await until(() => Date.now() - openedAt > (i + 1) * 500, 'the next piece\'s turn');
  }
  ok(await write(c, 'flush', undefined, opened.epoch));
  const lastWriteAt = Date.now();
  await stack.kill();
  await stack.restart();
  // Past what the open's time would allow (open + idle), still inside last write + idle.
  const armedDeadline = openedAt + idle;
  await until(() => Date.now() > armedDeadline + 2000, 'the open\'s idle deadline to pass', idle + 30_000);
  assert.ok(Date.now() < lastWriteAt + idle, 'still inside the last write\'s idle timeout (a slow machine would make this test vacuous)');
  assert.equal(rows(stack, c.id).row.status, 'streaming', 'not sealed: the producer was quiet for less than its idle timeout');
  const grant = ok(await resume(c, opened.epoch));
  assert.equal(grant.seq, written.length);
  ok(await write(c, 'append', 'done.', grant.epoch));
  assert.equal(ok(await write(c, 'close', undefined, grant.epoch)).status, 'complete');
  assert.equal(durableFromDb(stack.db, c.id).text, `${written}done.`);
});

test('a retried invocation whose open is lost in a reset never takes over the live producer\'s answer (producer.js)', async () => {
  await stack.restart();
  const id = newStream(stack, 'surv-retried');
  const token = stack.token(id);
  const first = await openStream({ baseUrl: stack.baseUrl, streamId: id, token, watch: false, resume: { timeoutMs: 30_000 } });
  await first.append('the first invocation\'s answer, ');
  await first.flush();
  // A reset; meanwhile the platform retries the invocation: its open cannot reach the runtime
  // (the connection is refused), so producer.js resumes once the runtime is back, as it must
  // after a lost open (which may have taken).
  await stack.kill();
  const second = openStream({ baseUrl: stack.baseUrl, streamId: id, token, watch: false, resume: { timeoutMs: 30_000, baseDelayMs: 200 } }).then(
    (s) => ({ opened: s }),
    (err) => ({ refused: err }),
  );
  await stack.restart();
  const outcome = await withTimeout(second, 40_000, 'the second invocation\'s open to settle');
  if (outcome.opened) await outcome.opened.append('THE SECOND INVOCATION\'S ANSWER').catch(() => {});
  assert.equal(outcome.refused?.code, 'superseded', `the second invocation is refused, not given the stream (it ${outcome.opened ? 'was granted it' : `failed with ${outcome.refused}`})`);
  // The first goes on: it resumes with its epoch and completes its answer alone.
  await first.append('and nothing else.');
  assert.equal((await first.close()).status, 'complete');
  const row = durableFromDb(stack.db, id);
  assert.deepEqual([row.row.status, row.text], ['complete', 'the first invocation\'s answer, and nothing else.']);
});
