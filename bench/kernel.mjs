#!/usr/bin/env node
// What the kernel does for each delivery: the Worker's workerd process counted during
// bench.mjs's fan-out, side by side. `perf stat`'s software events (context switches, CPU
// migrations, page faults, task clock: counted by the kernel, so available where this VM's CPUs
// give perf no hardware counter) and, with --strace, `strace -c`'s system calls by name. The
// part of the CPU that callgrind's instruction count cannot see (bench/instructions.mjs counts
// user space only) is either here or in time per instruction (BENCHMARKS.md, "What the kernel
// does per delivery").
//
//   node bench/kernel.mjs --bare --readers 1 --reps 2            # context switches, faults per delivery
//   node bench/kernel.mjs --bare --readers 1 --strace            # and system calls per delivery
//   node bench/kernel.mjs --bare --plain --readers 1 --json
//
// Options: those of bench/compare.mjs's load (--readers, --rate, --seconds, --warmup,
// --warmup-rate, --plain, --var), --side floor,rindle (default; floorRs too), --reps N
// (alternating, default 1), --bare, --strace (ptrace slows every system call, so a run with it
// reports counts, not CPU), --json. Needs `perf` (and `strace` for --strace) with permission to
// attach to the process (root, or perf_event_paranoid ≤ 1 and ptrace allowed).
import { fileURLToPath } from 'node:url';
import { fanout, loadFromArgs, median, onFreshStack, round } from './bench.mjs';
import { perfAttached, toolAttached } from './perf-attach.mjs';

const EVENTS = ['context-switches', 'cpu-migrations', 'page-faults', 'task-clock'];

/** `perf stat -x,` lines (value,unit,event,…) as { event: value }. */
export function parsePerfStat(text) {
  const counts = {};
  for (const line of text.split('\n')) {
    const [value, , event] = line.split(',');
    if (event && EVENTS.includes(event) && value !== '' && !Number.isNaN(Number(value))) counts[event] = Number(value);
  }
  return counts;
}

/** `strace -c`'s table as { syscall: calls }. */
export function parseStraceSummary(text) {
  const calls = {};
  for (const line of text.split('\n')) {
    // % time, seconds, usecs/call, calls, [errors,] syscall
    const m = /^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?([a-z_0-9]+)\s*$/.exec(line);
    if (m && m[2] !== 'total') calls[m[2]] = Number(m[1]);
  }
  return calls;
}

/** One side's fan-out with the kernel's counts over its measured window, per delivery. */
export async function kernelRun(side, load, { bare = false, strace = false } = {}) {
  const perf = perfAttached(['stat', '-x,', '-e', EVENTS.join(',')]);
  // strace says when it has attached to every thread of the process.
  const tracer = strace ? toolAttached('strace', ['-c', '-f'], { attachedWhen: /Process \d+ attached/ }) : null;
  let counts = {};
  let calls = null;
  const r = await onFreshStack(side, (target) => fanout(target, {
    ...load,
    during: {
      start: async () => {
        await perf.start(target.stack.workerPid);
        await tracer?.start(target.stack.workerPid);
      },
      stop: async () => {
        if (tracer) calls = parseStraceSummary(await tracer.stop());
        counts = parsePerfStat(await perf.stop());
      },
    },
  }), { vars: load.vars, bare });
  const per = (n) => (typeof n === 'number' && r.deliveries ? round(n / r.deliveries, 3) : null);
  const syscalls = calls ? Object.fromEntries(Object.entries(calls).sort((a, b) => b[1] - a[1]).map(([name, n]) => [name, per(n)])) : null;
  return {
    side,
    deliveries: r.deliveries,
    cpuMsPer1000Deliveries: strace ? null : r.cpuMsPer1000Deliveries,
    contextSwitches: per(counts['context-switches']),
    cpuMigrations: per(counts['cpu-migrations']),
    pageFaults: per(counts['page-faults']),
    taskClockMsPer1000Deliveries: counts['task-clock'] === undefined ? null : per(counts['task-clock'] * 1000),
    syscalls,
    syscallsTotal: calls ? per(Object.values(calls).reduce((a, b) => a + b, 0)) : null,
  };
}

async function main() {
  const { load, values } = loadFromArgs(process.argv.slice(2), { seconds: 10, strings: ['side', 'reps'] });
  const sides = (values.side ?? 'floor,rindle').split(',');
  const options = { bare: values.bare === true, strace: values.strace === true };
  const runs = Object.fromEntries(sides.map((s) => [s, []]));
  for (let i = 0; i < Number(values.reps ?? 1); i++) {
    for (const side of sides) {
      const run = await kernelRun(side, load, options);
      runs[side].push(run);
      process.stderr.write(`kernel: ${side} #${i + 1}: ${JSON.stringify(run)}\n`);
    }
  }
  if (values.json) {
    process.stdout.write(`${JSON.stringify({ load, ...options, runs }, null, 2)}\n`);
    return;
  }
  const med = (side, key) => {
    const xs = runs[side].map((r) => r[key]).filter((x) => typeof x === 'number');
    return xs.length ? round(median(xs), 3) : '–';
  };
  console.log(`${load.plain ? 'one POST per delta' : 'one streaming append'}, ${load.readers} readers, ${load.rate}/s × ${load.seconds} s, ${values.reps ?? 1} runs each (median), per delivery${options.bare ? ', bare' : ''}${options.strace ? ', under strace' : ''}`);
  const keys = ['contextSwitches', 'cpuMigrations', 'pageFaults', 'taskClockMsPer1000Deliveries', 'cpuMsPer1000Deliveries', ...(options.strace ? ['syscallsTotal'] : [])];
  console.log(`| side | ${keys.join(' | ')} |`);
  console.log(`|---|${keys.map(() => '---').join('|')}|`);
  for (const side of sides) console.log(`| ${side} | ${keys.map((k) => med(side, k)).join(' | ')} |`);
  if (options.strace) {
    const names = [...new Set(sides.flatMap((s) => runs[s].flatMap((r) => Object.keys(r.syscalls ?? {}))))];
    console.log(`\n| system call, per delivery | ${sides.join(' | ')} |`);
    console.log(`|---|${sides.map(() => '---').join('|')}|`);
    for (const name of names) {
      console.log(`| ${name} | ${sides.map((s) => round(median(runs[s].map((r) => r.syscalls?.[name] ?? 0)), 3)).join(' | ')} |`);
    }
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((e) => {
    process.stderr.write(`kernel: ${e.stack ?? e}\n`);
    process.exit(1);
  });
}
