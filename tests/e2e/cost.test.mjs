// A smoke run of bench/cost.mjs (small answers, a short linger and lease), so the cost tool
// cannot rot: every count it reports must agree with what the run's own configuration and
// schema say an answer costs. The formulas asserted here are the ones BENCHMARKS.md ("The cost
// of an answer") prices; a change that moves a count (one more request, another statement per
// checkpoint, a lost counter) fails here and must update both.
import test from 'node:test';
import assert from 'node:assert/strict';
import { analyse, formatReport, naiveD1, resumableStreamRedis, rindleUnits, runCost } from '../../bench/cost.mjs';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './harness.mjs';
import { openSqlite } from './sqlite.mjs';

// The lease's alarm fires within one lease of the seal: the alarm finds the stream still held
// (sealed) and reads nothing (see the D1 reads below).
const VARS = { LINGER_MS: '5000', LEASE_MS: '1000' };

/**
 * Indexes on the chunk table (its primary key's included) in the schema the migrations build:
 * D1 counts one row written per index an INSERT updates, besides the row itself.
 */
/** How long the object holds a producer's watch while nothing happens (src/engine/live/watch.rs). */
const WATCH_HOLD_MS = 20_000;

function chunkIndexes() {
  const db = openSqlite(':memory:');
  try {
    const dir = join(ROOT, 'migrations');
    for (const f of readdirSync(dir).filter((f) => f.endsWith('.sql')).sort()) db.exec(readFileSync(join(dir, f), 'utf8'));
    return db.prepare(`SELECT count(*) AS n FROM pragma_index_list('message_chunks')`).get().n;
  } finally {
    db.close();
  }
}

test('cost smoke run: every count agrees with the formula the run\'s configuration and schema give', { timeout: 240_000 }, async (t) => {
  const report = await runCost({ tokens: [40, 150], readers: [1, 3], formats: ['text', 'ui'], tokensPerSecond: 300, vars: VARS, log: (l) => t.diagnostic(l) });
  for (const line of formatReport(report).split('\n')) t.diagnostic(line);
  const lease = Number(VARS.LEASE_MS);
  const insertRows = 1 + chunkIndexes();
  assert.ok(report.answers.some((a) => a.checkpoints > 0) && report.answers.some((a) => a.checkpoints === 0), 'answers with and without checkpoints');
  for (const a of report.answers) {
    const label = `${a.format} ${a.tokens} tokens, ${a.readers} readers`;
    const { meter, d1 } = a.answer;
    const k = a.checkpoints;
    const { stats, watch, ...served } = meter.requests;
    assert.ok(stats > 0, `${label}: the meter's own reads are counted apart`);
    // Requests: the recommended producer path is one open, one streaming append and one close,
    // with its watch held beside them (asked again every 20 s while the answer runs); each
    // reader is one GET that ends with the answer; the lease's alarm runs once.
    assert.deepEqual(served, { open: 1, append: 1, close: 1, [a.format === 'ui' ? 'ui' : 'events']: a.readers }, `${label}: requests`);
    assert.ok(watch >= 1 && watch <= 1 + Math.ceil(a.openToCloseMs / WATCH_HOLD_MS), `${label}: ${watch} watch requests in ${a.openToCloseMs} ms`);
    assert.equal(meter.alarms, 1, `${label}: one alarm invocation`);
    assert.equal(rindleUnits(a).doRequests, 3 + watch + a.readers + 1, `${label}: billed requests`);
    // The object's own storage (src/engine/host/object_storage.rs): the lease's keys (streamId,
    // hostToken, armedAt, format, and producer: public/producer.js names itself at the open) put
    // once when the lease is armed, after a `list()` of what the object held (nothing: no rows
    // read); the alarm after the seal lists the five (five rows read) and forgets them all (one
    // delete). One setAlarm at open, then one per half lease while the stream is alive (at most
    // as many as fit between open and close).
    assert.deepEqual({ puts: meter.storage.puts, gets: meter.storage.gets, deletes: meter.storage.deletes }, { puts: 5, gets: 5, deletes: 1 }, `${label}: storage`);
    const renewals = meter.storage.setAlarms - 1;
    assert.ok(renewals >= 0 && renewals <= Math.floor(a.openToCloseMs / (lease / 2)), `${label}: ${renewals} renewals in ${a.openToCloseMs} ms`);
    // D1: open = probe, mark, host read; a checkpoint = one batch (insert, seq update, read-back);
    // the seal = one batch: the guarded chunk rows' delete, the body update, and the row's
    // summary read (whether the guard held).
    assert.equal(d1.rounds, 3 + k + 1, `${label}: D1 round trips, ${k} checkpoints`);
    assert.equal(d1.statements, 3 + 3 * k + 3, `${label}: statements`);
    assert.equal(d1.rowsWritten, 1 + k * (insertRows + 1) + (1 + k), `${label}: rows written = mark + k × (chunk row and its ${insertRows - 1} index entries + seq update) + seal (body + k deletes)`);
    // Rows read: open 3, k × 4 (the insert's guard, the fence's read of the row it checks, the
    // update, the read-back: every durable write carries the fence since 2026-12-07); the seal
    // reads the row for its update and its summary (2), and 3 per chunk row its guarded delete
    // removes (the chunk row, and the guard's read of the message row through its key, as D1
    // counts them: measured); one row more when another stream's rows follow this one's in an
    // index the statements scan (the run's answers stream side by side; measured on 2026-12-07:
    // 6 at k = 0, 12 or 13 at k = 1).
    const rowsRead = 3 + 4 * k + 2 + 3 * k;
    assert.ok(d1.rowsRead === rowsRead || d1.rowsRead === rowsRead + 1, `${label}: rows read ${d1.rowsRead}, expected ${rowsRead} (+1)`);
    // What stays: the body in the message row, no chunk row; the peak never exceeds the checkpoints.
    assert.equal(a.d1Storage.finalChunkRows, 0, `${label}: compacted`);
    assert.equal(a.d1Storage.finalBodyBytes, a.utf8Bytes, `${label}: the body is the answer`);
    assert.ok(a.d1Storage.peakChunkRows <= k, `${label}: peak ${a.d1Storage.peakChunkRows} chunk rows, ${k} checkpoints`);

    // Awake: only while the answer runs. No timer holds a finished answer's object (the linger
    // waits for no timer, the lease's alarm does not keep it awake): from the open to the close
    // and the seal's own round trips, not LINGER_MS more.
    assert.ok(meter.awakeMs < a.openToCloseMs + 1000, `${label}: awake ${meter.awakeMs} ms for an answer of ${a.openToCloseMs} ms (linger ${VARS.LINGER_MS} ms)`);
    assert.equal(meter.holds, 0, `${label}: asleep at the end`);
    // A late read of the finished answer is one object request. `/text` reads the row (one row
    // read, no chunk rows) from D1 in one statement; `/ui` is served from the sealed stream while
    // the object still holds it (this run's polling keeps it from being evicted), else from the
    // row the same way. The object's storage holds nothing to read.
    const late = a.lateRead;
    const lateServed = Object.fromEntries(Object.entries(late.meter.requests).filter(([route, n]) => n > 0 && route !== 'stats'));
    assert.deepEqual(lateServed, { [a.format === 'ui' ? 'ui' : 'text']: 1 }, `${label}: late read`);
    const lateD1 = a.format === 'ui' && late.d1.rounds === 0 ? { rounds: 0, rowsRead: 0 } : { rounds: 1, rowsRead: 1 };
    assert.deepEqual({ gets: late.meter.storage.gets, rounds: late.d1.rounds, rowsRead: late.d1.rowsRead, alarms: late.meter.alarms }, { gets: 0, ...lateD1, alarms: 0 }, `${label}: late read's storage and D1`);
  }
  // A finished answer leaves nothing in its object's storage.
  assert.deepEqual([report.objectStorage.keys, report.objectStorage.keyValueBytes], [0, 0], `left behind: ${JSON.stringify(report.objectStorage)}`);
  assert.equal(report.objectStorage.objects, report.answers.length, 'one object per answer, each measured');
  const analysis = analyse(report, { answersPerMonth: 100_000, tokens: 150, readers: 1.2, format: 'text', pollSeconds: 1 });
  for (const design of ['rindle', 'naiveD1', 'naiveObjectStorage', 'redis']) {
    assert.ok(analysis.price[design].list > 0, `${design}: the workload is priced`);
  }
});

test('the formulas beside it: each counts what its design issues', () => {
  // resumable-stream: SET + SUBSCRIBE, SET DONE + UNSUBSCRIBE; a follower: GET, SUBSCRIBE,
  // PUBLISH request, the replay PUBLISH, UNSUBSCRIBE, plus a PUBLISH per chunk and DONE.
  assert.equal(resumableStreamRedis({ deltas: 1000, readers: 1 }).redisCommands, 4);
  assert.equal(resumableStreamRedis({ deltas: 1000, readers: 3 }).redisCommands, 4 + 2 * (1000 + 1 + 5));
  // Every delta to D1: a row and its index entry per delta, the final message once; 2 readers
  // polling each second over 20 s poll 21 times each.
  assert.deepEqual(naiveD1({ deltas: 1000, readers: 2, seconds: 20, pollSeconds: 1 }), { workerRequests: 43, d1RowsWritten: 2001, d1RowsRead: 2042, doRequests: 0, doGbSeconds: 0 });
});
