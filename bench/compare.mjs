#!/usr/bin/env node
// Before/after of one change: the same fan-out scenario (bench.mjs) against two or more builds
// of the Worker, alternating between them for several repetitions so that a busy machine's
// drift falls on every side alike. Reports each build's median and range.
//
//   node bench/compare.mjs --snapshot before        # copy the current build to a scratch root
//   ... change the code, scripts/build.sh --dev ...
//   node bench/compare.mjs --roots before,. --plain --readers 10 --reps 5
//   node bench/compare.mjs --roots before,. --readers 1 --seconds 10 --reps 5 --json
//
// A root is a snapshot name (under $TMPDIR/rindle-variants), or a project directory ('.' is
// this one; --roots '' runs no build of rindle-streams). --side floor adds the floor, --side
// floorRs the same floor in Rust (bench/floor-rs: build it first with
// `BUILD_CRATE=bench/floor-rs scripts/build.sh`), --side floor,floorRs both; a side followed by
// :NAME (--side floorRs,floorRs:manual) runs that snapshot's build of it, and one followed by
// @KEY=VALUE (--side floor,floor@FLOOR_CHECKPOINTS=1) runs with those variables. Other
// options: --rate N (default 100), --seconds N (default 5), --var KEY=VALUE (repeatable, every
// side); a root followed by @KEY=VALUE (repeatable: .@A=1@B=2) runs with those variables too.
// --flush N measures the flush round trip instead (bench.mjs flushRoundTrip, N flushes). --bare
// serves every side with bench/bare-serve.mjs (no entry Worker or dev middleware per request).
// --pin runs the load on CPU 0 and the Worker's workerd, all its threads, on CPU 1 (taskset).
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, rmSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadFromArgs, median, pooledPercentile, varsOf } from './bench.mjs';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const PROJECT = resolve(HERE, '..');
const SNAPSHOTS = join(os.tmpdir(), 'rindle-variants');

/** Copies what a stack runs (the dev build, its config, migrations, assets) to a snapshot root. */
export function snapshot(name) {
  const dir = join(SNAPSHOTS, name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  for (const part of ['build-dev', 'wrangler.toml', 'migrations', 'public', 'package.json', 'bench']) {
    cpSync(join(PROJECT, part), join(dir, part), { recursive: true });
  }
  symlinkSync(join(PROJECT, 'node_modules'), join(dir, 'node_modules'));
  return dir;
}

const rootOf = (name) => (existsSync(join(SNAPSHOTS, name, 'build-dev')) ? join(SNAPSHOTS, name) : resolve(name));

/** One fan-out run in a child process (the harness reads its root at load time). */
function runOnce(root, side, options, { bare }) {
  const script = `
    const { fanout, flushRoundTrip, onFreshStack } = await import(${JSON.stringify(join(PROJECT, 'bench', 'bench.mjs'))});
    const { execFileSync } = await import('node:child_process');
    const o = ${JSON.stringify(options)};
    // --pin: this process (the load, and what it starts) on CPU 0, the Worker's workerd on CPU 1.
    const pin = (pid, cpu) => execFileSync('taskset', ['-a', '-p', '-c', String(cpu), String(pid)], { stdio: 'ignore' });
    if (o.pin) pin(process.pid, 0);
    const pinned = (t) => {
      if (o.pin) pin(t.stack.workerPid, 1);
      return t;
    };
    const run = (t) => (o.flushes ? flushRoundTrip(pinned(t), { flushes: o.flushes }) : fanout(pinned(t), o));
    const r = await onFreshStack(${JSON.stringify(side)}, run, { vars: o.vars, bare: ${bare} });
    process.stdout.write(JSON.stringify({ ...r, latencies: r.latencies }));`;
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { env: { ...process.env, RINDLE_ROOT: root }, maxBuffer: 1 << 24 });
  return JSON.parse(out.toString());
}

async function main() {
  const { load: options, values } = loadFromArgs(process.argv.slice(2), { strings: ['roots', 'reps', 'side', 'snapshot', 'floor-bodies', 'flush'] });
  if (values.flush) options.flushes = Number(values.flush);
  if (values.pin) options.pin = true;
  if (values.snapshot) {
    process.stdout.write(`${snapshot(values.snapshot)}\n`);
    return;
  }
  // A root may carry variables after '@' (--roots '.,.@READER_PACING_US=0'): that build run
  // with them, to compare settings of one build in one sitting.
  const sides = (values.roots ?? '.').split(',').filter(Boolean).map((name) => {
    const [root, ...settings] = name.split('@');
    return { name, root: rootOf(root), side: 'rindle', vars: varsOf(settings) };
  });
  // --side floor, --side floorRs, --side floor,floorRs: the JavaScript floor, the same floor in
  // Rust (bench/floor-rs), both.
  const floors = { floor: 'floor', floorRs: 'floor-rs' };
  // A side may name a snapshot after a colon (floorRs:manual): that snapshot's build of it; and,
  // as a root does, carry variables after '@' (floor@FLOOR_CHECKPOINTS=1).
  for (const spec of (values.side ?? '').split(',').filter(Boolean).reverse()) {
    const [build, ...settings] = spec.split('@');
    const [side, snap] = build.split(':');
    if (!floors[side]) throw new Error(`--side ${side}: not floor or floorRs`);
    const name = [snap ? `${floors[side]}:${snap}` : floors[side], ...settings].join('@');
    sides.unshift({ name, root: snap ? rootOf(snap) : PROJECT, side, vars: varsOf(settings) });
  }
  // --floor-bodies transform,enqueue,identity: one floor per way of writing a reader's body.
  for (const body of (values['floor-bodies'] ?? '').split(',').filter(Boolean).reverse()) {
    sides.unshift({ name: `floor-${body}`, root: PROJECT, side: 'floor', vars: { FLOOR_BODY: body } });
  }
  const reps = Number(values.reps ?? 5);
  const bare = values.bare === true;
  const runs = Object.fromEntries(sides.map((s) => [s.name, []]));
  for (let i = 0; i < reps; i++) {
    for (const s of i % 2 ? [...sides].reverse() : sides) {
      const r = runOnce(s.root, s.side, { ...options, vars: { ...options.vars, ...s.vars } }, { bare });
      runs[s.name].push(r);
      if (options.flushes) {
        process.stderr.write(`compare: ${s.name} #${i + 1}: flush p50 ${r.p50} p99 ${r.p99}, D1 round trips per checkpoint ${r.d1RoundsPerCheckpoint ?? 'n/a'}\n`);
        continue;
      }
      process.stderr.write(`compare: ${s.name} #${i + 1}: CPU ${r.cpuMsPer1000Deliveries} ms / 1k deliveries (Worker ${r.workerCpuMsPer1000Deliveries}), ${r.achievedRate}/s, p50 ${r.p50} p99 ${r.p99}, ${r.stalls} stalls, ${r.checkpoints} checkpoints${r.appendP50 !== undefined ? `, append p50 ${r.appendP50} p99 ${r.appendP99}` : ''}\n`);
    }
  }
  const summary = Object.fromEntries(
    Object.entries(runs).map(([name, rs]) => {
      const stat = (key) => {
        const xs = rs.map((r) => r[key]).filter((x) => typeof x === 'number');
        return xs.length ? { median: median(xs), min: Math.min(...xs), max: Math.max(...xs) } : null;
      };
      const p99Pooled = pooledPercentile(rs, 99);
      for (const r of rs) delete r.latencies;
      return [
        name,
        {
          cpuMsPer1000Deliveries: stat('cpuMsPer1000Deliveries'),
          workerCpuMsPer1000Deliveries: stat('workerCpuMsPer1000Deliveries'),
          achievedRate: stat('achievedRate'),
          p50: stat('p50'),
          p99: stat('p99'),
          p99Pooled,
          stalls: stat('stalls'),
          checkpoints: stat('checkpoints'),
          appendP50: stat('appendP50'),
          appendP99: stat('appendP99'),
          complete: rs.every((r) => r.complete),
        },
      ];
    }),
  );
  if (values.json) {
    process.stdout.write(`${JSON.stringify({ options, reps, bare, summary, runs }, null, 2)}\n`);
    return;
  }
  const r1 = (x) => Math.round(x * 10) / 10;
  const fmt = (s) => (s ? `${r1(s.median)} (${r1(s.min)}–${r1(s.max)})` : 'n/a');
  if (options.flushes) {
    process.stdout.write(`flush round trip (one delta appended, then POST /flush), ${options.flushes} flushes, ${reps} runs each (median, range); load average ${os.loadavg()[0].toFixed(1)}\n`);
    process.stdout.write('| build | flush p50 ms | flush p99 ms |\n|---|---|---|\n');
    for (const [name, s] of Object.entries(summary)) process.stdout.write(`| ${name} | ${fmt(s.p50)} | ${fmt(s.p99)} |\n`);
    return;
  }
  process.stdout.write(`${options.plain ? 'one POST per delta' : 'one streaming append'}, ${options.readers} readers, ${options.rate}/s × ${options.seconds} s, ${reps} runs each (median, range)${bare ? ', bare (bench/bare-serve.mjs)' : ''}; load average ${os.loadavg()[0].toFixed(1)}\n`);
  process.stdout.write('| build | CPU ms / 1k deliveries | of which the Worker\'s process | deltas/s | p50 ms | p99 ms | p99 ms, runs pooled | stalls | checkpoints | append answered p50 / p99 ms |\n|---|---|---|---|---|---|---|---|---|---|\n');
  for (const [name, s] of Object.entries(summary)) {
    process.stdout.write(`| ${name} | ${fmt(s.cpuMsPer1000Deliveries)} | ${fmt(s.workerCpuMsPer1000Deliveries)} | ${fmt(s.achievedRate)} | ${fmt(s.p50)} | ${fmt(s.p99)} | ${s.p99Pooled ?? 'n/a'} | ${fmt(s.stalls)} | ${fmt(s.checkpoints)} | ${fmt(s.appendP50)} / ${fmt(s.appendP99)} |\n`);
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((e) => {
    process.stderr.write(`compare: ${e.stack ?? e}\n`);
    process.exit(1);
  });
}
