// A smoke run of the benchmark (bench/bench.mjs --smoke: seconds per scenario), so the
// harness cannot rot: both stacks start (rindle-streams and the JavaScript floor), every
// scenario runs at a small size, and the report is complete and consistent. The figures
// themselves are not judged here (timed assertions on a shared 2-core machine would be
// noise); BENCHMARKS.md holds the full run's numbers.
import test from 'node:test';
import assert from 'node:assert/strict';
import { formatReport, problems, runBench } from '../../bench/bench.mjs';

test('benchmark smoke run: floor and rindle-streams measured side by side, every scenario reported', { timeout: 240_000 }, async (t) => {
  const report = await runBench({ smoke: true, log: (line) => t.diagnostic(line) });
  t.diagnostic(formatReport(report));
  assert.deepEqual(problems(report), [], 'every reader got every delta exactly once');
  for (const { floor, rindle } of report.latency) {
    for (const x of [floor, rindle]) {
      assert.equal(x.deliveries, x.expectedDeliveries, `${x.target} ${x.readers} readers: deliveries`);
      assert.ok(x.p50 > 0 && x.p99 >= x.p50, `${x.target} ${x.readers} readers: latency ${x.p50}/${x.p99}`);
      assert.ok(x.cpuMs > 0, `${x.target}: workerd CPU was measured from /proc`);
    }
  }
  assert.ok(report.maxRate.floor.steps.length > 0 && report.maxRate.rindle.steps.length > 0, 'max-rate steps ran');
  const [d1] = report.d1;
  assert.ok(d1.statements > 0 && d1.rowsWritten > 0, `D1 traffic counted at the executor: ${JSON.stringify(d1)}`);
  assert.ok(d1.bytesBound >= d1.textBytes, 'every character is written at least once');
  assert.equal(report.flush.d1RoundsPerCheckpoint, 1, `a checkpoint is one D1 round trip, its read-back included: ${JSON.stringify(report.flush)}`);
  for (const { text, ui } of report.ui) {
    assert.ok(text.complete && ui.complete, `ui vs text, ${ui.readers} readers: every delta delivered on both`);
  }
  assert.ok(report.ui.length > 0, 'the ui-vs-text fan-out ran');
  assert.ok(report.memory.rindle.heldMb > 0 && report.memory.floor.heldMb > 0 && report.memory.floorLease.heldMb > 0, 'workerd memory was measured');
  assert.equal(typeof report.memory.rindle.wasmHeapInUseMbPer100Streams, 'number', 'the wasm heap was read from /stats');
  assert.ok(report.wasm.gzip > 0 && report.wasm.raw > report.wasm.gzip, 'wasm size');
  assert.ok(report.variants.perDeltaD1.default.statementsPerDelta < 1, 'no per-delta D1 work');
});
