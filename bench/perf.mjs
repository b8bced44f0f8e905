#!/usr/bin/env node
// Where workerd's own time goes: `perf record` (Linux perf, with call graphs) of the Worker's
// workerd process while bench.mjs's fan-out scenario runs. bench/profile.mjs sees only what V8's
// sampler attributes to the isolate; this sees the whole process (the runtime's C++, its
// streams, the request objects it builds, V8's background compiles), with workerd's symbols.
// Needs `perf` and permission to trace the process (root, or perf_event_paranoid ≤ 1).
//
//   node bench/perf.mjs --plain --readers 1 --out /tmp/rindle.data   # then: perf report -i …
//   node bench/perf.mjs --side floor --plain --readers 1 --out /tmp/floor.data
//   node bench/perf.mjs --plain --readers 1 --out /tmp/r.data --grep 'CfProperty|Compil'
//
// Options: those of bench/compare.mjs's load (--readers, --rate, --seconds, --warmup, --plain,
// --var), --side rindle|floor|floorRs, --out FILE (default $TMPDIR/rindle-<side>.perf.data),
// --freq Hz (default 2000), --bare (serve the stack with bench/bare-serve.mjs), --grep RE (print
// the inclusive share of the symbols matching RE), --jit-names (V8 writes /tmp/perf-<pid>.map,
// so that `perf report` names the code it generated, rindle's wasm functions and the JavaScript
// glue, instead of one "[JIT]" block: bench/workerd-v8-flags.sh).
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

// Before the harness loads: it reads the environment its stacks run with once.
if (process.argv.includes('--jit-names')) {
  process.env.MINIFLARE_WORKERD_PATH = fileURLToPath(new URL('./workerd-v8-flags.sh', import.meta.url));
  process.env.WORKERD_V8_FLAGS = (await import('./workerd-v8-flags.mjs')).PERF_MAP_FLAGS;
}
const { fanout, loadFromArgs, onFreshStack } = await import('./bench.mjs');
const { perfAttached } = await import('./perf-attach.mjs');

const { load, values } = loadFromArgs(process.argv.slice(2), { seconds: 8, strings: ['side', 'out', 'freq', 'grep'] });
const side = values.side ?? 'rindle';
const out = values.out ?? join(os.tmpdir(), `rindle-${side}.perf.data`);
const perf = perfAttached(['record', '-F', String(values.freq ?? 2000), '-g', '-o', out]);
const result = await onFreshStack(side, (target) =>
  fanout(target, { ...load, during: { start: () => perf.start(target.stack.workerPid), stop: async () => { process.stderr.write(await perf.stop()); } } }),
  { vars: load.vars, bare: values.bare === true });
console.log(`${side}: ${result.deliveries} deliveries, ${result.cpuMsPer1000Deliveries ?? '?'} ms CPU / 1k deliveries; perf data in ${out}`);
/** `perf report`'s lines of (share %, symbol), self samples or (`children`) inclusive. */
const reportOf = (children) =>
  execFileSync('perf', ['report', '-i', out, children ? '--children' : '--no-children', '--sort', 'sym', '-g', 'none'], { maxBuffer: 1 << 28, stdio: ['ignore', 'pipe', 'ignore'] })
    .toString().split('\n').filter((line) => !line.startsWith('#') && line.trim());
if (values.grep) {
  const wanted = new RegExp(values.grep);
  for (const line of reportOf(true)) if (wanted.test(line)) console.log(line.slice(0, 200));
}
if (values['jit-names']) {
  // The code V8 generated, by kind (self samples, share of the process), and its largest functions.
  const kinds = [
    ['wasm, optimized (Turbofan)', (s) => s.startsWith('JS:') && s.endsWith('-turbofan')],
    ['wasm, baseline (Liftoff)', (s) => s.startsWith('JS:') && s.endsWith('-liftoff')],
    ['wasm→JavaScript import wrappers', (s) => s.startsWith('JS:wasm-to-js')],
    ['JavaScript (the bundle, wrangler\'s dev middleware)', (s) => s.startsWith('JS:')],
    ['V8 built-ins for wasm', (s) => s.startsWith('Builtins_Wasm')],
    ['other V8 built-ins (interpreter, ICs, typed arrays, …)', (s) => s.startsWith('Builtins_')],
  ];
  const share = Object.fromEntries(kinds.map(([kind]) => [kind, 0]));
  const wasm = [];
  for (const line of reportOf(false)) {
    const m = /^\s*([\d.]+)%\s+\[.\]\s+(.*)$/.exec(line);
    if (!m) continue;
    const [pct, sym] = [Number(m[1]), m[2].trim()];
    const kind = kinds.find(([, is]) => is(sym));
    if (kind) share[kind[0]] += pct;
    if (kind && kind[0].startsWith('wasm, ')) wasm.push([pct, sym]);
  }
  console.log('code V8 generated, self samples (share of the process):');
  for (const [kind, pct] of Object.entries(share)) console.log(`  ${pct.toFixed(2).padStart(6)}%  ${kind}`);
  console.log('largest wasm functions:');
  for (const [pct, sym] of wasm.slice(0, 15)) console.log(`  ${pct.toFixed(2).padStart(6)}%  ${sym.slice(0, 160)}`);
}
