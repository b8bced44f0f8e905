// Load on loopback (bench/load.mjs does the work; `node bench/load.mjs` runs the full size).
//
// The full 50 streams × 10 readers × 50 deltas/s × 60 s does NOT hold on a 2-core machine
// under `wrangler dev`: the dev proxy in front of the Worker (wrangler's ProxyWorker plus its
// node process, which burns ~70% of a core relaying ~2,000 SSE frames/s even for a 5-line JS
// Worker) saturates at a few thousand frames/s, and with concurrent streaming appends it
// opens thousands of loopback connections until workerd hits its 20,000-fd limit ("Too many
// open files"). So CI runs a bounded size that this environment sustains with headroom even
// after the rest of the suite: 6 streams × 4 readers × 25 deltas/s × 30 s (≈600 frames/s
// fanned out), streaming appends. (At 50 deltas/s, on the slow machine of 2026-12-01 its p99 in
// full-suite runs was 0.4, 0.7, 0.8, 2.0 and once 10.5 s, past the 5 s bound, with p50 260 ms:
// no headroom left there.) (8 × 5 held alone, but twice in three full-suite runs the dev
// proxy stalled for seconds and then failed requests with 503 "worker restarted".) The load goes
// to the Worker's own socket, past the dev proxy (load.mjs's pastTheProxy; production has no
// such hop): on a machine about twice as slow (2026-12-01: the native fan-out micro-benchmark
// at 1.5-2.5x its figures in BENCHMARKS.md), through the proxy this size saturated both cores,
// the relay fell seconds behind (p50 5-8 s) and healthy readers were dropped stale; past it
// both tests pass there, p50 25-213 ms over five runs (three alone, two in full-suite runs).
// LOAD_STREAMS / LOAD_READERS / LOAD_SECONDS / LOAD_RATE / LOAD_MODE override it.
//
// Checked for every reader (contract S): no character lost or doubled, every chunk's
// text.length == seq - from, contiguous, durable never ahead of delivery, `end` at the full
// length; one reader per stream joins late from the durable text it just read (a splice).
// Memory: retainedBytes never exceeds the produced text plus full reader queues.
// A second test pauses one reader's socket (MAX_QUEUED_FRAMES=64 in that stack): it must get
// `stale`, be dropped (log line reader_dropped), and the other readers' latency must stay put.
// Its streams carry 20 deltas/s, not 50: the cap of 64 frames holds for every reader of that
// stack, so at 50/s a healthy reader whose body the runtime did not drain for 1.3 s was dropped
// too (one fresh-clone run in four on the slow machine of 2026-12-01, while the paused reader's
// 64 KB deltas kept workerd busy; with two CPU burners beside it, 3 runs in 4). At 20/s a
// healthy reader has 3.2 s: with one burner 3/3 runs passed, with two no healthy reader got
// stale in 2 runs (one of them broke the latency bound below under that overload).
import test from 'node:test';
import assert from 'node:assert/strict';
import { startStack } from './harness.mjs';
import { formatReport, pastTheProxy, runLoad } from '../../bench/load.mjs';

const env = process.env;
const SIZE = {
  streams: Number(env.LOAD_STREAMS ?? 6),
  readers: Number(env.LOAD_READERS ?? 4),
  rate: Number(env.LOAD_RATE ?? 25),
  seconds: Number(env.LOAD_SECONDS ?? 30),
  mode: env.LOAD_MODE ?? 'streaming',
};
// retainedBytes counts every queued frame by its encoded size (once per queue holding it).
// A frame's wire form is at most its text's bytes twice over (JSON escaping of the SSE traps
// in the text) plus the frame's fields.
const frameBytes = (textBytes) => 2 * textBytes + 128;
const MAX_DELTA_BYTES = 8 * 40; // bench/load.mjs: 2-8 pieces of at most 40 bytes each

let stack;
test.before(async () => {
  stack = await startStack({ name: 'e2e-load' }); // MAX_QUEUED_FRAMES: the default 1024
});
test.after(async () => {
  await stack?.stop();
});

function report(t, r) {
  for (const line of formatReport(r).split('\n')) t.diagnostic(line);
}

test(`load: ${SIZE.streams} streams × ${SIZE.readers} readers × ${SIZE.rate} deltas/s × ${SIZE.seconds} s (${SIZE.mode} appends): nothing lost, doubled or spliced wrong`, { timeout: (SIZE.seconds + 180) * 1000 }, async (t) => {
  const r = await runLoad(await pastTheProxy(stack), { ...SIZE, slow: false, onAbort: () => stack.kill() });
  report(t, r);
  assert.deepEqual(r.violations, [], 'contract violations');
  assert.deepEqual(r.errors, [], 'errors');
  assert.equal(r.closes.ok, r.closes.of, 'every close answered 200');
  assert.equal(r.delivered.deltaReceipts, r.delivered.expectedDeltaReceipts, 'every reader from 0 received every delta');
  assert.ok(r.produced.deltasPerSec >= 0.8 * r.produced.targetDeltasPerSec, `producers kept only ${r.produced.deltasPerSec}/s of ${r.produced.targetDeltasPerSec}/s`);
  assert.ok(r.latencyMs.p50 < 1000, `p50 latency ${r.latencyMs.p50} ms`);
  assert.ok(r.latencyMs.p99 < 5000, `p99 latency ${r.latencyMs.p99} ms`);
  assert.ok(r.memory.statsPolls >= 3, 'stats were polled during the run');
  const queueBound = (SIZE.readers + 1) * 1024 * frameBytes(MAX_DELTA_BYTES);
  assert.ok(r.memory.queueOverheadBytesMax <= queueBound, `retainedBytes exceeded the produced text by ${r.memory.queueOverheadBytesMax} bytes (bound ${queueBound})`);
  assert.ok(r.memory.retainedBytesMax <= r.memory.producedBytesMaxPerStream + queueBound, 'retainedBytes beyond the text plus full queues');
});

test('a reader that stops reading gets stale, is dropped, and does not slow the other readers', { timeout: 240_000 }, async (t) => {
  await stack.restart({ vars: { MAX_QUEUED_FRAMES: '64' } });
  const r = await runLoad(await pastTheProxy(stack), { streams: 4, readers: 5, rate: 20, seconds: 30, mode: 'streaming', slow: true, onAbort: () => stack.kill() });
  report(t, r);
  assert.deepEqual(r.violations, [], 'contract violations (including the paused reader not being dropped)');
  assert.deepEqual(r.errors, [], 'errors');
  const s = r.slowStream;
  assert.ok(s.droppedAfterMs !== null, 'the paused reader was dropped');
  assert.equal(s.staleFrame?.type, 'stale', 'its last frame is stale');
  assert.equal(typeof s.staleFrame.floorSeq, 'number');
  assert.equal(typeof s.staleFrame.durableSeq, 'number');
  assert.match(s.logLine, /"event":"reader_dropped"/);
  assert.equal(s.readersAfterDrop, 1, 'only the healthy reader is left on that stream');
  assert.ok(s.healthyReaderLatencyMs.n > 0, 'the healthy reader of the slow stream kept receiving');
  // The others' latency while the reader was paused stays close to the 10 s before it.
  const { baseline, whilePaused } = r.latencyWindowsMs;
  assert.ok(baseline.n > 0 && whilePaused.n > 0, `latency windows ${JSON.stringify(r.latencyWindowsMs)}`);
  assert.ok(whilePaused.p50 <= Math.max(3 * baseline.p50, baseline.p50 + 250), `p50 ${baseline.p50} → ${whilePaused.p50} ms while paused`);
  assert.ok(whilePaused.p99 <= Math.max(3 * baseline.p99, baseline.p99 + 1000), `p99 ${baseline.p99} → ${whilePaused.p99} ms while paused`);
  // Two readers with queues of at most 64 frames of one slow delta each, however many
  // megabytes went through before the paused one was dropped.
  const slowBound = 2 * 64 * frameBytes(r.config.slowDeltaBytes);
  assert.ok(r.memory.slowStreamOverheadBytesMax <= slowBound, `the slow stream's queues grew past the cap: ${r.memory.slowStreamOverheadBytesMax} bytes (bound ${slowBound})`);
});
