#!/usr/bin/env node
// Stop latency (SPEC §10): from a reader's cancel (its POST sent) to the producer's
// `stream.signal` firing, and to the model's connection closed by the producer, in each state an
// answer can be in (before the first append, mid streaming append, during a streaming append a
// rebuilt object refused, in the gap after a reset, right after a resume), for a producer over
// HTTP (this process, wrangler dev's URL) and a producer Worker through a service binding (its
// own wrangler dev, joined by a dev registry). The answers are tests/survival/stop/scenario.mjs's,
// `--runs` per state and producer, in one sitting on one pair of stacks; each state is waited for
// (holds, gates, kills), never timed. p99 of 20 samples is their maximum.
//
//   node bench/stop.mjs                    # 20 runs per state and producer, seed random (printed)
//   E2E_SEED=7 node bench/stop.mjs --runs 5 --out bench/results/stop.json
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { percentile, rng, seedFromEnv } from '../tests/e2e/util.mjs';
import { KINDS, startRig, STATES, stopAt } from '../tests/survival/stop/scenario.mjs';

const { values: args } = parseArgs({ options: { runs: { type: 'string', default: '20' }, out: { type: 'string' } } });
const RUNS = Number(args.runs);
const seed = seedFromEnv();
const r = rng(seed);
console.log(`E2E_SEED=${seed}: ${RUNS} cancels per state and producer`);

const rig = await startRig({ name: 'bench-stop' });
const samples = [];
try {
  for (let run = 0; run < RUNS; run++) {
    for (const kind of KINDS) {
      for (const state of STATES) samples.push(await stopAt(rig, kind, state, r, (line) => console.log(`  ${run + 1}/${RUNS} ${line}`)));
    }
  }
} finally {
  await rig.close();
}

const rows = [];
for (const state of STATES) {
  for (const kind of KINDS) {
    const of = samples.filter((s) => s.state === state && s.kind === kind);
    const signal = of.map((s) => s.signalMs).sort((a, b) => a - b);
    const model = of.map((s) => s.modelMs).sort((a, b) => a - b);
    rows.push({ state, kind, n: of.length, signalP50: percentile(signal, 50), signalP99: percentile(signal, 99), modelP50: percentile(model, 50), modelP99: percentile(model, 99), over1s: of.filter((s) => s.signalMs > 1000 || s.modelMs > 1000).length });
  }
}
console.log('\n| state | producer | n | signal p50 / p99 (ms) | model stopped p50 / p99 (ms) | over 1 s |');
console.log('|---|---|---|---|---|---|');
for (const x of rows) {
  console.log(`| ${x.state} | ${x.kind === 'node' ? 'HTTP (Node)' : 'Worker (service binding)'} | ${x.n} | ${x.signalP50} / ${x.signalP99} | ${x.modelP50} / ${x.modelP99} | ${x.over1s} |`);
}
if (args.out) writeFileSync(args.out, JSON.stringify({ seed, runs: RUNS, at: new Date().toISOString(), rows, samples }, null, 2));
process.exit(0);
