// A smoke run of the benchmark (bench/bench.mjs --smoke: seconds per scenario), so the
// harness cannot rot: both stacks start (rindle-streams and the JavaScript floor), every
// scenario runs at a small size, and the report is complete and consistent. The figures
// themselves are not judged here (timed assertions on a shared 2-core machine would be
// noise); BENCHMARKS.md holds the full run's numbers.
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { fanout, formatReport, onFreshStack, problems, runBench, workerBase } from '../../bench/bench.mjs';
import { mintToken, readSse, startStack } from './harness.mjs';
import { newStream, rows } from './util.mjs';
import { PERF_MAP_FLAGS, withV8Flags } from '../../bench/workerd-v8-flags.mjs';
import { kernelRun } from '../../bench/kernel.mjs';

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

// bench/workerd-v8-flags.mjs edits miniflare's binary workerd config by hand (perf.mjs's
// named JIT frames). Checked against miniflare's own encoder, and against workerd itself.
test('workerd-v8-flags: the flags land in the config as miniflare would encode them, and workerd applies them', { timeout: 60_000 }, async () => {
  const { serializeConfig } = createRequire(import.meta.url)('miniflare');
  const flags = ['--perf-basic-prof', '--stack-size=900'];
  assert.ok(withV8Flags(serializeConfig({}), flags).equals(serializeConfig({ v8Flags: flags })), 'byte for byte miniflare\'s encoding');
  // A config with other pointers set: the flags are appended, the rest still decodes (workerd runs it).
  const wrapper = fileURLToPath(new URL('../../bench/workerd-v8-flags.sh', import.meta.url));
  const config = serializeConfig({ services: [{ name: 'main', worker: { compatibilityDate: '2026-04-20', modules: [{ name: 'w.mjs', esModule: 'export default { test() {} }' }] } }] });
  // `workerd test` loads the config, starts the isolate and exits; --perf-basic-prof makes V8
  // write /tmp/perf-<pid>.map, which it would not without the flag.
  const run = (env) => {
    // The shell's pid is workerd's: it execs the wrapper, which execs workerd.
    const out = execFileSync('bash', ['-c', `echo $$; exec "${wrapper}" test --binary -`], { input: config, env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'ignore'] });
    const pid = out.toString().trim().split('\n')[0];
    const map = `/tmp/perf-${pid}.map`;
    const found = existsSync(map);
    rmSync(map, { force: true });
    return found;
  };
  assert.equal(run({ WORKERD_V8_FLAGS: PERF_MAP_FLAGS }), true, 'the flag reached V8');
  assert.equal(run({ WORKERD_V8_FLAGS: '' }), false, 'without flags the config passes unchanged');
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
    const sse = await readSse(`${url('events')}?from=0&token=${encodeURIComponent(stack.token(id))}`);
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

// bench/kernel.mjs reads perf's software events and strace's system calls over a fan-out's
// measured window. Checked against what a delivery must cost the kernel: each delta reaches
// its one reader through a write to that reader's socket.
test('kernel: the kernel\'s work per delivery, counted on the Worker\'s own workerd', { timeout: 120_000 }, async () => {
  const r = await kernelRun('rindle', { readers: 1, rate: 50, seconds: 1, warmupSeconds: 0, vars: {} }, { bare: true, strace: true });
  assert.equal(r.deliveries, 50, 'every delta delivered under the tracer');
  const socketWrites = ['write', 'writev', 'sendmsg', 'sendto'].reduce((n, name) => n + (r.syscalls[name] ?? 0), 0);
  assert.ok(socketWrites >= 0.9, `about one socket write per delivery at least: ${JSON.stringify(r.syscalls)}`);
  assert.ok(r.syscallsTotal >= socketWrites, 'the total counts every call');
  assert.ok(r.contextSwitches > 0 && r.taskClockMsPer1000Deliveries > 0, `perf's software events were read: ${JSON.stringify(r)}`);
  assert.equal(typeof r.pageFaults, 'number');
});
