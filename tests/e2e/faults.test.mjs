// Injected D1 faults (TEST_FAULTS, honoured with DEV_MODE=1) at rate 0.3, one kind at a time:
//   before   a checkpoint/seal write fails before it commits
//   lost     a checkpoint/seal write commits, then its reply is lost
//   readback a checkpoint write commits and its reply is lost, then the read-back that decides
//            what landed fails too (a checkpoint reads its row in its own transaction, so a
//            separate read-back follows only a failed write); seals are left alone
// over long, emoji-heavy streams. Asserted at every step:
//   P  every /text read during the stream is a prefix of what was produced, and never shrinks;
//   S  readers joining at random offsets <= the durable length they just read splice exactly:
//      durableText(from) ++ frames == produced;
//   flush either confirms everything produced (durableSeq == seq) or answers 503
//      checkpoint_failed with an honest {seq, durableSeq} (durableSeq <= what D1 holds);
//   close 200 → the row is `complete` with exactly the produced text; 503 seal_failed → the
//      row is still a prefix, readers got `end` with the durable seq, and the lease later
//      retries the seal from the lingering stream (or, failing that, seals it `interrupted`).
// A last test makes every write fail (rate=1) so the failure paths are taken for certain.
//
// One stack, restarted with different TEST_FAULTS between tests. CHECKPOINT_RETRIES=1 (not
// the default 3) so that a round fails often enough (0.3² = 9%) for the 503 paths to show up
// at rate 0.3 too; LEASE_MS=2000 so a failed seal's repair is seen within the test.
import test from 'node:test';
import assert from 'node:assert/strict';
import { startStack } from './harness.mjs';
import {
  api, assertPrefix, checkFrames, durableFromDb, newStream, ok, rng, seedFromEnv, splitCodePoints, emojiText, until,
} from './util.mjs';

const LEASE_MS = 2000;
const STREAMS_PER_KIND = Number(process.env.FAULT_STREAMS ?? 3);
const SEED = seedFromEnv();
const BASE_VARS = {
  DEV_MODE: '1',
  CHECKPOINT_CHARS: '256',
  CHECKPOINT_INTERVAL_MS: '100',
  CHECKPOINT_RETRIES: '1',
  LEASE_MS: String(LEASE_MS),
};

let stack;
const totals = [];

test.before(async () => {
  stack = await startStack({ name: 'e2e-faults', vars: { ...BASE_VARS, TEST_FAULTS: faultSpec('before', 0.3, 0) } });
});
test.after(async () => {
  await stack?.stop();
});

function faultSpec(kind, rate, k) {
  const kinds = kind === 'readback' ? 'lost,readback;ops=append' : kind;
  return `rate=${rate};kinds=${kinds};seed=${(SEED % 100_000) + k}`;
}

async function useFaults(spec) {
  if (stack.vars.TEST_FAULTS !== spec) await stack.restart({ vars: { TEST_FAULTS: spec } });
}

/** D1's durable text for `id`, asserted to be a prefix of `produced`. */
function dbDurable(id, produced, what) {
  const d = durableFromDb(stack.db, id);
  assertPrefix(d.text, produced, `${what}: D1's durable text`);
  return d;
}

/**
 * One long stream under faults. Returns its counters. `expectSealOk` asserts the close
 * answers 200 (for a kind that cannot break a seal).
 */
async function runStream({ kind, r, label, units, expectSealOk = false }) {
  const id = newStream(stack, `f-${kind}`);
  const c = api(stack, id);
  ok(await c.open(), `${label}: open`);
  const pieces = splitCodePoints(emojiText(r, units), r, 5, 80);
  let produced = '';
  let lastText = 0;
  const readers = [];
  const n = { textReads: 0, flushOk: 0, flush503: 0, readers: 0 };

  for (let i = 0; i < pieces.length; i++) {
    const a = ok(await c.append(pieces[i]), `${label}: append ${i}`);
    produced += pieces[i];
    assert.equal(a.seq, produced.length, `${label}: append seq`);
    assert.ok(a.durableSeq <= a.seq, `${label}: append durableSeq ${a.durableSeq} > seq ${a.seq}`);
    const held = dbDurable(id, produced, `${label}: after append ${i}`);
    assert.ok(a.durableSeq <= held.text.length, `${label}: append claims ${a.durableSeq} durable, D1 holds ${held.text.length}`);

    if (i % 5 === 4) {
      // Contract P at a /text read taken during the stream.
      const t = ok(await c.text(), `${label}: /text`);
      n.textReads++;
      assert.equal(t.status, 'streaming', `${label}: /text status during the stream`);
      assert.equal(t.seq, t.text.length, `${label}: /text seq is its text's UTF-16 length`);
      assertPrefix(t.text, produced, `${label}: /text during the stream (P)`);
      assert.ok(t.seq >= lastText, `${label}: /text shrank from ${lastText} to ${t.seq} (P)`);
      lastText = t.seq;
      // A reader joins at a random offset within what it just read durably.
      if (readers.length < 5 && r.chance(0.25)) {
        const asked = r.int(0, t.seq);
        readers.push({ sse: await c.events(asked), durableText: t.text, asked, at: produced.length });
        n.readers++;
      }
    }

    if (i % 17 === 16) {
      const f = await c.flush();
      const held2 = dbDurable(id, produced, `${label}: after flush`);
      if (f.status === 200) {
        n.flushOk++;
        assert.equal(f.json.durableSeq, produced.length, `${label}: a confirmed flush covers everything produced`);
        assert.equal(f.json.seq, produced.length, `${label}: flush seq`);
        assert.ok(held2.text.length >= f.json.durableSeq, `${label}: flush confirmed ${f.json.durableSeq}, D1 holds ${held2.text.length}`);
      } else {
        n.flush503++;
        assert.equal(f.status, 503, `${label}: flush answered ${f.status} ${f.raw}`);
        assert.equal(f.json?.error, 'checkpoint_failed', `${label}: flush error ${f.raw}`);
        assert.equal(typeof f.json.message, 'string', `${label}: flush message`);
        assert.equal(f.json.seq, produced.length, `${label}: failed flush seq`);
        assert.ok(f.json.durableSeq < f.json.seq, `${label}: failed flush says ${f.json.durableSeq} of ${f.json.seq} durable`);
        assert.ok(f.json.durableSeq <= held2.text.length, `${label}: failed flush claims ${f.json.durableSeq}, D1 holds ${held2.text.length} (overclaim)`);
      }
    }
  }

  // A reader that joins right before the close, at the current durable length.
  const before = ok(await c.text(), `${label}: /text before close`);
  assertPrefix(before.text, produced, `${label}: /text before close (P)`);
  assert.ok(before.seq >= lastText, `${label}: /text shrank before close`);
  readers.push({ sse: await c.events(before.seq), durableText: before.text, asked: before.seq, at: produced.length });

  const cl = await c.close();
  const stats = ok(await c.stats(), `${label}: stats after close`); // the stream lingers
  assert.equal(typeof stats.faultsInjected, 'number', `${label}: faultsInjected is reported with DEV_MODE=1`);
  let endSeq;
  let sealOk;
  if (cl.status === 200) {
    sealOk = true;
    assert.deepEqual(cl.json, { status: 'complete', seq: produced.length, durableSeq: produced.length }, `${label}: close`);
    const d = durableFromDb(stack.db, id);
    assert.equal(d.row.status, 'complete', `${label}: row status`);
    assert.equal(d.row.body, produced, `${label}: a 200 close leaves exactly the produced text in the body`);
    assert.equal(d.row.seq, produced.length, `${label}: row seq`);
    assert.equal(d.chunks.length, 0, `${label}: chunk rows compacted`);
    endSeq = produced.length;
  } else {
    sealOk = false;
    assert.ok(!expectSealOk, `${label}: close answered ${cl.status} ${cl.raw} although ${kind} faults cannot break a seal`);
    assert.equal(cl.status, 503, `${label}: close answered ${cl.status} ${cl.raw}`);
    assert.equal(cl.json?.error, 'seal_failed', `${label}: close error ${cl.raw}`);
    assert.equal(cl.json.status, 'complete', `${label}: seal_failed status`);
    assert.equal(cl.json.seq, produced.length, `${label}: seal_failed seq`);
    // durableSeq may equal seq: every character can be durable as chunk rows while the
    // terminal status still failed to commit.
    assert.ok(cl.json.durableSeq <= cl.json.seq, `${label}: seal_failed with ${cl.json.durableSeq} of ${cl.json.seq}`);
    const d = dbDurable(id, produced, `${label}: after a failed seal`);
    assert.ok(d.text.length >= cl.json.durableSeq, `${label}: seal_failed claims ${cl.json.durableSeq}, D1 holds ${d.text.length}`);
    endSeq = cl.json.durableSeq;
  }

  // Contract S for every reader; each got `end` with the durable seq.
  for (const [k, rd] of readers.entries()) {
    const what = `${label}: reader ${k} (asked ${rd.asked} after ${rd.at} produced)`;
    await rd.sse.next((f) => f.json?.type === 'end', 15_000);
    rd.sse.close();
    const { end } = checkFrames(rd.sse.frames, { produced, durableText: rd.durableText, asked: rd.asked, label: what });
    assert.equal(end.seq, endSeq, `${what}: end.seq`);
    assert.equal(end.status, 'complete', `${what}: end.status`);
  }

  // A late reader (inside the linger window) splices onto the final durable text too.
  const final = ok(await c.text(), `${label}: /text after close`);
  assertPrefix(final.text, produced, `${label}: /text after close`);
  assert.ok(final.seq >= lastText && final.seq >= endSeq, `${label}: /text after close shrank`);
  const lateAsked = r.int(0, final.seq);
  const late = await c.events(lateAsked);
  await late.next((f) => f.json?.type === 'end', 10_000);
  late.close();
  checkFrames(late.frames, { produced, durableText: final.text, asked: lateAsked, label: `${label}: late reader` });

  // A row whose seal failed does not stay `streaming`: it ends `complete` with exactly the
  // produced text (the seal committed despite a lost reply, or the lease retried it from the
  // lingering stream), or `interrupted` by the lease from what D1 holds.
  if (!sealOk) {
    await until(() => stack.db.get(`SELECT status FROM messages WHERE id = ?`, id).status !== 'streaming', `${label}: the row to be sealed`, LEASE_MS + 15_000);
    const d = durableFromDb(stack.db, id);
    assert.equal(d.chunks.length, 0, `${label}: chunk rows left after the row was sealed`);
    if (d.row.status === 'complete') {
      assert.equal(d.row.body, produced, `${label}: a seal completed after the 503 holds exactly the produced text`);
    } else {
      assert.equal(d.row.status, 'interrupted', `${label}: after a failed seal the row must be sealed (complete or, by the lease, interrupted)`);
      assertPrefix(d.row.body, produced, `${label}: interrupted body`);
      assert.ok(d.row.body.length >= endSeq, `${label}: interrupted body shorter than the durable seq`);
    }
    n.afterFailedSeal = d.row.status;
  }

  return { ...n, units: produced.length, sealOk, stats };
}

for (const [k, kind] of ['before', 'lost', 'readback'].entries()) {
  test(`D1 faults "${kind}" at rate 0.3: P at every /text read, S for readers joining anywhere, honest flush and close`, { timeout: 240_000 }, async (t) => {
    const spec = faultSpec(kind, 0.3, k);
    await useFaults(spec);
    const r = rng(SEED + k);
    t.diagnostic(`seed ${SEED} (E2E_SEED replays), TEST_FAULTS=${spec}`);
    const runs = await Promise.all(
      Array.from({ length: STREAMS_PER_KIND }, (_, s) =>
        runStream({ kind, r: rng(SEED + 100 * k + s), label: `${kind} #${s}`, units: r.int(4000, 7000), expectSealOk: kind === 'readback' }),
      ),
    );
    const sum = (f) => runs.reduce((a, x) => a + f(x), 0);
    const row = {
      kind,
      streams: runs.length,
      units: sum((x) => x.units),
      faultsInjected: sum((x) => x.stats.faultsInjected),
      checkpoints: sum((x) => x.stats.checkpoints),
      retries: sum((x) => x.stats.retries),
      failedRounds: sum((x) => x.stats.failures),
      flushOk: sum((x) => x.flushOk),
      flush503: sum((x) => x.flush503),
      close200: runs.filter((x) => x.sealOk).length,
      close503: runs.filter((x) => !x.sealOk).length,
      rowAfter503: runs.filter((x) => !x.sealOk).map((x) => x.afterFailedSeal),
      textReads: sum((x) => x.textReads),
      readers: sum((x) => x.readers) + runs.length * 2,
    };
    totals.push(row);
    t.diagnostic(JSON.stringify(row));
    assert.ok(row.faultsInjected > 0, `no fault was injected (${JSON.stringify(row)})`);
    if (kind === 'lost') {
      // SPEC §5: the read-back after a checkpoint absorbs a write that committed while its
      // reply was lost, so lost replies never fail a checkpoint round or a flush.
      assert.equal(row.failedRounds, 0, `a lost reply failed a checkpoint round (${JSON.stringify(row)})`);
      assert.equal(row.flush503, 0, `a lost reply failed a flush (${JSON.stringify(row)})`);
    } else {
      assert.ok(row.retries > 0, `faults were injected but nothing was retried (${JSON.stringify(row)})`);
    }
  });
}

test('every checkpoint and seal write fails (rate=1, before): flush and close answer 503 with honest numbers, readers still end', { timeout: 120_000 }, async (t) => {
  await useFaults(faultSpec('before', 1, 9));
  const r = rng(SEED + 9);
  const id = newStream(stack, 'f-all');
  const c = api(stack, id);
  ok(await c.open(), 'open (opening is never faulted)');
  const reader = await c.events(0);
  let produced = '';
  for (const piece of splitCodePoints(emojiText(r, 1500), r, 5, 80)) {
    const a = ok(await c.append(piece), 'append');
    produced += piece;
    assert.equal(a.durableSeq, 0, 'nothing can be durable');
  }
  const f = await c.flush();
  assert.equal(f.status, 503, `flush: ${f.status} ${f.raw}`);
  assert.equal(f.json.error, 'checkpoint_failed');
  assert.deepEqual({ seq: f.json.seq, durableSeq: f.json.durableSeq }, { seq: produced.length, durableSeq: 0 }, 'failed flush numbers');
  const t1 = ok(await c.text(), '/text');
  assert.deepEqual(t1, { text: '', seq: 0, status: 'streaming', format: 'text' }, '/text: nothing durable');
  await stack.waitForLog(/"event":"checkpoint_failed"[^\n]*"streamId":"f-all/, 10_000); // a failure is never silent

  const cl = await c.close();
  assert.equal(cl.status, 503, `close: ${cl.status} ${cl.raw}`);
  assert.equal(cl.json.error, 'seal_failed');
  assert.deepEqual({ status: cl.json.status, seq: cl.json.seq, durableSeq: cl.json.durableSeq }, { status: 'complete', seq: produced.length, durableSeq: 0 });
  await reader.next((fr) => fr.json?.type === 'end', 10_000);
  reader.close();
  const { end } = checkFrames(reader.frames, { produced, asked: 0, label: 'reader' });
  assert.equal(end.seq, 0, 'end carries the durable seq, not the produced one');
  const stats = ok(await c.stats(), 'stats');
  assert.ok(stats.faultsInjected > 0 && stats.failures > 0, `stats ${JSON.stringify(stats)}`);
  const d = durableFromDb(stack.db, id);
  assert.equal(d.text, '', 'D1 holds nothing');
  assert.equal(d.row.seq, 0, 'row seq');
  await stack.waitForLog(/"event":"sealed"[^\n]*"shortfall":"[^\n]*"streamId":"f-all/, 10_000); // the shortfall is logged
  t.diagnostic(`all-fail stream: ${produced.length} units produced, flush 503, close 503 seal_failed, end.seq 0, stats ${JSON.stringify(stats)}`);
  // Totals of the rate-0.3 runs.
  for (const row of totals) t.diagnostic(`total ${row.kind}: ${JSON.stringify(row)}`);
});
