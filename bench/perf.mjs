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
// --var), --side rindle|floor|floorRs, --out FILE (default $TMPDIR/rindle-<side>.perf.data), --freq Hz
// (default 2000), --grep RE (print the inclusive share of the symbols matching RE).
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import { join } from 'node:path';
import { fanout, loadFromArgs, onFreshStack } from './bench.mjs';
import { perfAttached } from './perf-attach.mjs';

const { load, values } = loadFromArgs(process.argv.slice(2), { seconds: 8, strings: ['side', 'out', 'freq', 'grep'] });
const side = values.side ?? 'rindle';
const out = values.out ?? join(os.tmpdir(), `rindle-${side}.perf.data`);
const perf = perfAttached(['record', '-F', String(values.freq ?? 2000), '-g', '-o', out]);
const result = await onFreshStack(side, (target) =>
  fanout(target, { ...load, during: { start: () => perf.start(target.stack.workerPid), stop: async () => { process.stderr.write(await perf.stop()); } } }),
  { vars: load.vars });
console.log(`${side}: ${result.deliveries} deliveries, ${result.cpuMsPer1000Deliveries ?? '?'} ms CPU / 1k deliveries; perf data in ${out}`);
if (values.grep) {
  const report = execFileSync('perf', ['report', '-i', out, '--children', '--sort', 'sym', '-g', 'none'], { maxBuffer: 1 << 28, stdio: ['ignore', 'pipe', 'ignore'] }).toString();
  const wanted = new RegExp(values.grep);
  for (const line of report.split('\n')) if (!line.startsWith('#') && wanted.test(line)) console.log(line.slice(0, 200));
}
