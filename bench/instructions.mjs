#!/usr/bin/env node
// Instructions per delivery: bench.mjs's fan-out against each side with the Worker's workerd
// running under valgrind's callgrind, which counts every instruction the process executes in
// user space (all its threads: the isolate's, V8's compiles and GC, workerd's event loop, local
// D1's SQLite). CPU time on this shared 2-vCPU VM moves ±10% from one run to the next and the
// VM has no hardware instruction counter (`perf stat -e instructions`: not supported); a count
// of instructions moves far less (±1% between runs of a sitting), and not with what other
// processes do, except where the runtime decides by the clock: when V8 tiers a hot function
// up, when the collector runs, when rindle's reader pacing merges deltas. So one sitting at a
// time on a quiet machine: two sittings side by side moved a count by up to 50%. It is not time
// (no cache misses, no kernel work: the syscalls themselves are outside the count), so it
// complements the CPU figures of record, it does not replace them (BENCHMARKS.md,
// "Instructions per delivery").
//
//   node bench/instructions.mjs --readers 1 --reps 3                 # one streaming append
//   node bench/instructions.mjs --plain --readers 1 --side rindle,floor,floorRs
//
// Under callgrind the runtime is 50–100× slower while counting, so the load is slower too:
// --rate (default 5 deltas/s) for --seconds (default 40), after bench.mjs's warm-up of record
// (20,000 deltas, uncounted, with instrumentation off). At a twentieth of the rate of record, a
// time-driven round would come twenty times as often per delta, so rindle's time-driven
// settings (checkpoint interval, lease, keep-alive) are stretched by the same factor: per delta,
// the work is that of 100 deltas/s. (Reader pacing is not stretched: at 1 reader it never holds
// a write back; at 10 readers how many deltas it merges follows the process's speed, which is
// why a 10-reader count moved when another sitting ran beside it.)
//
// Options: those of bench/compare.mjs's load (--readers, --rate, --seconds, --warmup,
// --warmup-rate, --plain, --var), --side LIST (default rindle,floor; rindle, floor, floorRs),
// --reps N (default 3, alternating), --top N (the N largest self costs of each side's first
// run, by function), --cache-sim (also simulated cache misses and branch mispredictions per
// delivery; slower), --bare (stacks served by bench/bare-serve.mjs: without the dev stack's ~1 M
// instructions per request), --json. Needs valgrind (apt: valgrind).
import { mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { serveAlone } from './workerd-alone.mjs';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const dir = mkdtempSync(join(os.tmpdir(), 'rindle-callgrind-'));
// Before the harness loads: it reads the environment its stacks run with once.
process.env.MINIFLARE_WORKERD_PATH = join(HERE, 'workerd-callgrind.sh');
process.env.CALLGRIND_DIR = dir;
// --cache-sim: callgrind also simulates the caches and the branch predictor (a model of them,
// set from this CPU's cache sizes, not the hardware's own counters), for what a count of
// instructions cannot show: whether the same instructions miss more.
const SIMULATED = process.argv.includes('--cache-sim');
if (SIMULATED) process.env.CALLGRIND_OPTIONS = '--cache-sim=yes --branch-sim=yes';
const { fanout, loadFromArgs, median, onFreshStack, processCpuMs } = await import('./bench.mjs');

/** The rate of record, whose time-driven work per delta the stretched settings reproduce. */
const RATE_OF_RECORD = 100;
/** rindle-streams' settings that schedule work by time, not by delta. */
const TIME_DRIVEN = ['CHECKPOINT_INTERVAL_MS', 'LEASE_MS', 'KEEPALIVE_MS'];

/** wrangler.toml's [vars] value of `name` (a number of milliseconds). */
function configured(name) {
  const m = new RegExp(`^${name}\\s*=\\s*"(\\d+)"`, 'm').exec(readFileSync(join(HERE, '..', 'wrangler.toml'), 'utf8'));
  if (!m) throw new Error(`wrangler.toml has no ${name}`);
  return Number(m[1]);
}

/**
 * The garbage collectors' own functions (V8's and cppgc's marking, sweeping, scavenging) and the
 * clock and task loop their deadline-bounded steps run on. A major collection that falls in a
 * window brings incremental sweeping in steps bounded by time; valgrind slows the work and not
 * the deadline, so the steps multiply (seen: `FinalizeAndSweepWithDeadline`, `TimeTicks::Now`,
 * `PumpMessageLoop` together 20–60k instructions per delivery in one window, under 3k in the
 * next). Reported apart, so that a window with a collection and one without still compare.
 */
export const COLLECTOR = /MarkCompact|Scaveng|Sweep|Marking|MinorMS|Evacuat|GCTracer|cppgc::internal|Heap::CollectGarbage|TimeTicks::Now|clock_gettime|PumpMessageLoop|DefaultForegroundTaskRunner/;

/**
 * V8's compilers (Turbofan/Turboshaft, Maglev, Liftoff): a hot function tiered up inside the
 * window, after the warm-up, is compiled there once (seen: 18 M instructions in one window, 9k
 * per delivery). Also reported apart: it is not a cost per delivery.
 */
export const COMPILER = /compiler::|turboshaft|Turboshaft|maglev|Maglev|LiftoffCompiler|wasm::.*Compil/;

/**
 * `byFunction`'s self instructions in three parts, each function in exactly one: the compilers
 * (COMPILER), the collectors (COLLECTOR, but not a compiler's own pass whose name says
 * "Marking", such as Maglev's `AnyUseMarkingProcessor`), and the steady rest.
 */
export function split(byFunction) {
  const parts = { compiler: 0, collector: 0, steady: 0 };
  for (const [fn, ir] of byFunction) {
    if (COMPILER.test(fn)) parts.compiler += ir;
    else if (COLLECTOR.test(fn)) parts.collector += ir;
    else parts.steady += ir;
  }
  return parts;
}

/** The same pid's callgrind client, through vgdb: `callgrind_control ARGS pid`. */
const control = (pid, ...args) => execFileSync('callgrind_control', [...args, String(pid)], { stdio: ['ignore', 'pipe', 'pipe'] }).toString();

/**
 * One callgrind dump: its total instructions, the totals of every event it counted (`Ir` alone,
 * or with --cache-sim also reads, writes, misses and branches), and its self instructions by
 * object file (the runtime's binary, libc, and `???`: code with no file, what V8 generated at
 * run time, the wasm and the JavaScript) and by function. A cost line after `calls=` is a
 * call's inclusive cost, not the caller's own, and is skipped.
 */
export function readDump(text) {
  const names = { ob: new Map(), fn: new Map() };
  const named = (kind, value) => {
    const m = /^\((\d+)\)(?:\s(.*))?$/.exec(value);
    if (!m) return value;
    if (m[2] !== undefined) names[kind].set(m[1], m[2]);
    return names[kind].get(m[1]) ?? value;
  };
  const byObject = new Map();
  const byFunction = new Map();
  let total = null;
  let eventNames = ['Ir'];
  const events = new Map();
  let ob = '???';
  let fn = '???';
  let skipNext = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('ob=')) ob = named('ob', line.slice(3));
    else if (line.startsWith('fn=')) fn = named('fn', line.slice(3));
    else if (line.startsWith('cob=')) named('ob', line.slice(4));
    else if (line.startsWith('cfn=')) named('fn', line.slice(4));
    else if (line.startsWith('calls=')) skipNext = true;
    else if (line.startsWith('events:')) eventNames = line.slice(7).trim().split(/\s+/);
    else if (/^(totals|summary):/.test(line)) {
      const values = line.trim().split(/\s+/).slice(1).map(Number);
      eventNames.forEach((name, i) => events.set(name, values[i] ?? 0));
      total = values[0];
    }
    else if (/^[-+*\d]/.test(line)) {
      if (skipNext) {
        skipNext = false;
        continue;
      }
      const ir = Number(line.trim().split(/\s+/)[1] ?? 0);
      const obName = ob.split('/').pop();
      byObject.set(obName, (byObject.get(obName) ?? 0) + ir);
      byFunction.set(fn, (byFunction.get(fn) ?? 0) + ir);
    }
  }
  return { total, events, byObject, byFunction };
}

/**
 * Resolves once `pid` used under 1% of a core over a second (at most 120 s). After the warm-up
 * the runtime's garbage collector sweeps on for a while in small steps, each bounded by a time
 * deadline; valgrind slows each step's work and not its deadline, so a sweep that takes a few
 * milliseconds natively became up to 3 G instructions of task scheduling in a 40 s window
 * (`cppgc`'s `FinalizeAndSweepWithDeadline`, `TimeTicks::Now`), in one run of three.
 */
async function idle(pid) {
  const end = Date.now() + 120_000;
  for (let before = processCpuMs(pid); Date.now() < end; ) {
    await new Promise((r) => setTimeout(r, 1000));
    const now = processCpuMs(pid);
    if (now - before < 10) return;
    before = now;
  }
  throw new Error(`workerd ${pid} was still busy 120 s after the warm-up`);
}

/** Counts the instructions of `pid` between `start()` and `stop()`, the fan-out's measured window. */
export function counted() {
  let pid;
  let dump = null;
  let phase = 'before the window'; // where a failed run failed
  return {
    during: {
      async start(workerPid) {
        pid = workerPid;
        phase = 'waiting for idle';
        await idle(pid);
        control(pid, '--instr=on');
        control(pid, '--zero');
        phase = 'in the window';
      },
      async stop() {
        phase = 'after the window';
        const before = new Set(readdirSync(dir));
        control(pid, '--dump=window');
        control(pid, '--instr=off');
        const file = readdirSync(dir).find((f) => f.startsWith(`callgrind.out.${pid}.`) && !before.has(f));
        if (!file) throw new Error(`callgrind wrote no dump for ${pid} in ${dir}`);
        dump = { file: join(dir, file), ...readDump(readFileSync(join(dir, file), 'utf8')) };
      },
    },
    get dump() {
      return dump;
    },
    get phase() {
      return phase;
    },
  };
}

/** `source` served by workerd alone (bench/workerd-alone.mjs) under the callgrind wrapper. */
export const serveUnderCallgrind = (source) => serveAlone(source, { command: join(HERE, 'workerd-callgrind.sh') });

async function main() {
  const { load, values } = loadFromArgs(process.argv.slice(2), { seconds: 40, strings: ['side', 'reps', 'top'] });
  if (values.rate === undefined) load.rate = 5;
  const sides = (values.side ?? 'rindle,floor').split(',');
  const reps = Number(values.reps ?? 3);
  const top = Number(values.top ?? 0);
  const bare = values.bare === true;
  const stretch = RATE_OF_RECORD / load.rate;
  const stretched = Object.fromEntries(TIME_DRIVEN.map((name) => [name, String(Math.round(configured(name) * stretch))]));
  const runs = Object.fromEntries(sides.map((s) => [s, []]));
  for (let rep = 0; rep < reps; rep++) {
    for (const side of sides) {
      const vars = side === 'rindle' ? { ...stretched, ...load.vars } : load.vars;
      let meter;
      let r;
      // A run that fails before its window counted nothing and is run again on a fresh stack,
      // once: about one run in five, on either side, lost its producer's connection ("socket hang
      // up") during the warm-up, with nothing in the runtime's log. A run that fails after that,
      // or twice, is reported and the sitting goes on: its other runs stand on their own.
      for (let attempt = 1; ; attempt++) {
        meter = counted();
        try {
          r = await onFreshStack(side, (target) =>
            fanout(target, { ...load, during: { start: () => meter.during.start(target.stack.workerPid), stop: () => meter.during.stop() } }), { vars, bare });
          if (!r.complete) throw new Error(`the run did not deliver everything (${r.deliveries} of ${r.expectedDeliveries})`);
          break;
        } catch (e) {
          const failure = { side, failed: String(e.message ?? e), phase: meter.phase };
          runs[side].push(failure);
          process.stderr.write(`${side} ${rep + 1}/${reps}: failed ${meter.phase}: ${failure.failed}\n`);
          r = null;
          if (attempt === 2 || meter.phase !== 'before the window') break;
        }
      }
      if (!r) continue;
      const { total, events, byObject, byFunction, file } = meter.dump;
      const run = {
        side,
        deliveries: r.deliveries,
        instructions: total,
        instructionsPerDelivery: Math.round(total / r.deliveries),
        // What V8 generated (`???`: rindle's wasm and the JavaScript glue, the floor's JavaScript)
        // against the runtime's own binary.
        generatedPerDelivery: Math.round((byObject.get('???') ?? 0) / r.deliveries),
        runtimePerDelivery: Math.round((byObject.get('workerd') ?? 0) / r.deliveries),
        ...Object.fromEntries(Object.entries(split(byFunction)).map(([part, n]) => [`${part}PerDelivery`, Math.round(n / r.deliveries)])),
        // With --cache-sim: each simulated event per delivery (I1mr: first-level instruction
        // cache misses, ILmr/DLmr: last-level misses, Bcm/Bim: mispredicted branches, …).
        ...(SIMULATED ? { eventsPerDelivery: Object.fromEntries([...events].map(([name, n]) => [name, Math.round(n / r.deliveries)])) } : {}),
        checkpoints: r.checkpoints,
        // How busy the counted process was: near a core, deltas would queue and coalesce.
        workerCpuMs: r.workerCpuMs,
        p50: r.p50,
        // A median latency past one delta's interval means deltas queued behind each other: the
        // process fell behind (seen once: a garbage-collector sweep that valgrind's slowdown kept
        // going all window), so the window measured a backlog, not the steady state. Such a run is
        // shown and left out of the medians.
        backlogged: r.p50 > 1000 / load.rate,
        file,
      };
      runs[side].push(run);
      process.stderr.write(`${side} ${rep + 1}/${reps}: ${run.instructionsPerDelivery.toLocaleString('en')} instructions / delivery (generated code ${run.generatedPerDelivery.toLocaleString('en')}, runtime ${run.runtimePerDelivery.toLocaleString('en')}; the collectors ${run.collectorPerDelivery.toLocaleString('en')}, the compilers ${run.compilerPerDelivery.toLocaleString('en')}), ${r.deliveries} deliveries, ${r.checkpoints} checkpoint rounds, ${Math.round(r.workerCpuMs)} ms CPU, p50 ${r.p50} ms${run.backlogged ? ' (backlogged: left out of the medians)' : ''}\n`);
      if (run.eventsPerDelivery) process.stderr.write(`  per delivery: ${Object.entries(run.eventsPerDelivery).map(([name, n]) => `${name} ${n.toLocaleString('en')}`).join(', ')}\n`);
      if (top > 0 && rep === 0) {
        const largest = [...byFunction].sort((a, b) => b[1] - a[1]).slice(0, top);
        for (const [fn, ir] of largest) process.stderr.write(`  ${(ir / r.deliveries).toFixed(0).padStart(9)}  ${fn.slice(0, 150)}\n`);
      }
    }
  }
  const summary = Object.fromEntries(sides.map((s) => {
    const kept = runs[s].filter((r) => !r.backlogged && !r.failed);
    if (kept.length === 0) return [s, null]; // no run was complete and kept up: nothing to report
    const per = kept.map((r) => r.instructionsPerDelivery);
    const med = (figure) => median(kept.map(figure));
    const simulated = kept[0].eventsPerDelivery && Object.fromEntries(Object.keys(kept[0].eventsPerDelivery).map((name) => [name, med((r) => r.eventsPerDelivery[name])]));
    return [s, {
      ...(simulated ? { eventsPerDelivery: simulated } : {}),
      median: median(per),
      min: Math.min(...per),
      max: Math.max(...per),
      generated: med((r) => r.generatedPerDelivery),
      runtime: med((r) => r.runtimePerDelivery),
      collector: med((r) => r.collectorPerDelivery),
      compiler: med((r) => r.compilerPerDelivery),
      steady: med((r) => r.steadyPerDelivery),
      runs: kept.length,
      backlogged: runs[s].filter((r) => r.backlogged).length,
      failed: runs[s].filter((r) => r.failed).length,
    }];
  }));
  const base = summary.floor ?? Object.values(summary).find(Boolean);
  const load1 = `${load.plain ? 'one POST per delta' : 'one streaming append'}, ${load.readers} reader(s), ${load.rate} deltas/s × ${load.seconds} s, ${reps} runs each${bare ? ', bare (bench/bare-serve.mjs)' : ''}`;
  if (values.json) {
    console.log(JSON.stringify({ load: { ...load, stretched, bare }, summary, runs }, null, 2));
    return;
  }
  console.log(`instructions per delivery (callgrind), ${load1}; rindle's ${TIME_DRIVEN.join(', ')} ×${stretch}`);
  for (const [s, f] of Object.entries(summary)) {
    if (!f) {
      console.log(`  ${s.padEnd(8)} no run was complete and kept up`);
      continue;
    }
    if (f.eventsPerDelivery) console.log(`  ${s.padEnd(8)} per delivery (medians): ${Object.entries(f.eventsPerDelivery).map(([name, n]) => `${name} ${n.toLocaleString('en')}`).join(', ')}`);
    console.log(`  ${s.padEnd(8)} ${f.median.toLocaleString('en').padStart(10)} (${f.min.toLocaleString('en')}–${f.max.toLocaleString('en')}, ${f.runs} runs${f.backlogged ? `, ${f.backlogged} backlogged left out` : ''}${f.failed ? `, ${f.failed} failed` : ''}), generated code ${f.generated.toLocaleString('en')}, runtime ${f.runtime.toLocaleString('en')}, the collectors ${f.collector.toLocaleString('en')}, the compilers ${f.compiler.toLocaleString('en')}   ${(f.median / base.median).toFixed(3)}× the floor; without the collectors and compilers ${f.steady.toLocaleString('en')}, ${(f.steady / base.steady).toFixed(3)}×`);
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
