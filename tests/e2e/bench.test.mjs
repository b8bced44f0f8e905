// A smoke run of the benchmark (bench/bench.mjs --smoke: seconds per scenario), so the
// harness cannot rot: both stacks start (rindle-streams and the JavaScript floor), every
// scenario runs at a small size, and the report is complete and consistent. The figures
// themselves are not judged here (timed assertions on a shared 2-core machine would be
// noise); BENCHMARKS.md holds the full run's numbers.
import test from 'node:test';
import assert from 'node:assert/strict';
import { fanout, formatReport, onFreshStack, problems, runBench, workerBase } from '../../bench/bench.mjs';
import { mintToken, readSse, startStack } from './harness.mjs';
import { newStream, rows } from './util.mjs';

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

// bench/bare-serve.mjs (`--bare`) serves a config without wrangler dev's entry Worker, middleware
// and proxy. What it must not change is the Worker: the config's bindings (the Durable Object,
// D1 on the harness's state), the vars given on top, the env file's secret; and the benchmark
// must find one workerd to measure.
test('bare-serve: the config served bare, with its bindings, the given vars and secret, by one workerd', { timeout: 120_000 }, async () => {
  const stack = await startStack({ name: 'bare', bare: true, vars: { SSE_RETRY_MS: '1234' } });
  try {
    const { base, pid } = await workerBase(stack); // throws unless exactly one workerd serves it
    assert.equal(base, stack.baseUrl, 'the public port is the Worker\'s own socket');
    assert.ok(pid > 0);
    const id = newStream(stack);
    const url = (action) => `${base}/streams/${id}/${action}`;
    const otherSecret = mintToken({ stream: id, scope: 'read write cancel' }, 'not-the-env-files-secret-0123456789');
    const refused = await fetch(url('open'), { method: 'POST', headers: { authorization: `Bearer ${otherSecret}` } });
    assert.equal(refused.status, 403, 'a token signed with another secret is refused');
    const auth = { authorization: `Bearer ${stack.token(id)}` };
    assert.equal((await fetch(url('open'), { method: 'POST', headers: auth })).status, 200, 'the env file\'s secret is the Worker\'s');
    assert.equal((await fetch(url('append'), { method: 'POST', headers: auth, body: 'bare 😀' })).status, 200);
    assert.equal((await fetch(url('close'), { method: 'POST', headers: auth })).status, 200);
    const sse = await readSse(`${url('events')}?from=0&token=${encodeURIComponent(stack.token(id, 'read'))}`);
    await sse.done;
    assert.deepEqual(sse.frames[0], { retry: 1234 }, 'the --var reached the Worker');
    assert.equal(sse.frames.filter((f) => f.json?.type === 'chunk').map((f) => f.json.text).join(''), 'bare 😀');
    const { row } = rows(stack, id);
    assert.equal(row.body, 'bare 😀', 'sealed into the D1 file the harness reads');
    assert.equal(row.status, 'complete');
  } finally {
    await stack.stop();
  }
  // The floor's config too, measured by the fan-out as bench.mjs --bare does.
  const r = await onFreshStack('floor', (t) => fanout(t, { readers: 1, rate: 50, seconds: 1, warmupSeconds: 0 }), { bare: true });
  assert.equal(r.deliveries, r.expectedDeliveries, 'every delta reached the floor\'s reader');
  assert.ok(r.cpuMs > 0, 'the one workerd\'s CPU was read');
});
