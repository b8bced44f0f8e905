#!/usr/bin/env node
// Calls across the JavaScript↔wasm boundary per delta, by import: a count that does not
// depend on how busy the machine is, so a change that saves crossings shows it exactly (CPU
// figures on a shared machine move by ±10% from run to run).
//
//   node bench/crossings.mjs --plain --readers 1      # one POST per delta
//   node bench/crossings.mjs --readers 10             # one streaming append, 10 readers
//
// It copies the current build (scripts/build.sh) to a scratch root, wraps every function the
// wasm module imports with a counter that logs the totals every 2 s (console output reaches
// the stack's log), runs bench.mjs's fan-out there at 50 deltas/s for 12 s, and divides the
// counts between two log lines in the steady middle of the run by the deltas sent meanwhile.
// Options: --readers N, --plain, --rate N (default 50), --seconds N (default 12), --stacks NAME
// (also the call stacks of the imports whose name contains NAME, e.g. --stacks now).
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadFromArgs } from './bench.mjs';
import { snapshot } from './compare.mjs';

const SELF = fileURLToPath(import.meta.url);

/**
 * Wraps the imports object the module is instantiated with (each module copied first: an inline
 * snippet's is an ES module namespace, whose properties cannot be assigned). `stacksOf`: also
 * count the call stacks of the imports whose name contains it.
 */
const counter = (stacksOf) =>
  `globalThis.__crossings={};globalThis.__stacks={};const __stacksOf=${JSON.stringify(stacksOf ?? null)};` +
  "function __countCrossings(imports){for(const [name,module] of Object.entries(imports)){const m=imports[name]={...module};for(const k of Object.keys(m)){const f=m[k];if(typeof f!=='function')continue;m[k]=function(...a){globalThis.__crossings[k]=(globalThis.__crossings[k]||0)+1;" +
  "if(__stacksOf&&k.includes(__stacksOf)){const s=String(new Error().stack).split('\\n').slice(2,9).map(l=>l.trim().replace(/^at /,'').replace(/ \\(.*\\)$/,'')).join(' < ');globalThis.__stacks[s]=(globalThis.__stacks[s]||0)+1}" +
  "const now=Date.now();if(now-(globalThis.__crossingsLogged||0)>2000){globalThis.__crossingsLogged=now;console.log('CROSSINGS '+now+' '+JSON.stringify(globalThis.__crossings));if(__stacksOf)console.log('STACKS '+JSON.stringify(globalThis.__stacks))}return f.apply(this,a)}}}return imports}\n";

function instrumentedRoot(stacksOf) {
  const root = snapshot('crossings');
  const file = join(root, 'build', 'index.js');
  const js = readFileSync(file, 'utf8');
  const instantiate = /new WebAssembly\.Instance\((\w+),(\w+)\(\)\)/g;
  if (!instantiate.test(js)) throw new Error(`${file}: no WebAssembly.Instance(module, imports()) to instrument`);
  writeFileSync(file, counter(stacksOf) + js.replace(instantiate, 'new WebAssembly.Instance($1,__countCrossings($2()))'));
  return root;
}

/** In the child (RINDLE_ROOT is the instrumented root): the run, and crossings per delta. */
async function measure(load) {
  const { fanout, onFreshStack } = await import('./bench.mjs');
  return onFreshStack('rindle', async (target) => {
    await fanout(target, load);
    const lines = [...target.stack.logs().matchAll(/CROSSINGS (\d+) (\{[^\n]*\})/g)].map((m) => ({ at: Number(m[1]), counts: JSON.parse(m[2]) }));
    if (lines.length < 4) throw new Error(`only ${lines.length} count lines in the log: run longer`);
    const [a, b] = [lines[Math.floor(lines.length / 2) - 1], lines[Math.floor(lines.length / 2) + 1]];
    const deltas = ((b.at - a.at) / 1000) * load.rate;
    const perDelta = Object.entries(b.counts)
      .map(([name, n]) => [name.replace(/^__wbg_|_[0-9a-f]{16}$/g, ''), (n - (a.counts[name] ?? 0)) / deltas])
      .filter(([, n]) => n > 0.005)
      .sort((x, y) => y[1] - x[1]);
    const stacks = [...target.stack.logs().matchAll(/STACKS (\{[^\n]*\})/g)].map((m) => JSON.parse(m[1])).pop() ?? {};
    const calls = Object.values(stacks).reduce((sum, n) => sum + n, 0);
    const topStacks = Object.entries(stacks).sort((x, y) => y[1] - x[1]).slice(0, 8).map(([stack, n]) => [stack, n / calls]);
    return { total: perDelta.reduce((sum, [, n]) => sum + n, 0), perDelta, topStacks };
  });
}

async function main() {
  const { load, values } = loadFromArgs(process.argv.slice(2), { seconds: 12, strings: ['child', 'stacks'] });
  load.rate = Number(values.rate ?? 50);
  // The counts are read between two log lines in the middle of the whole run, warm-up included,
  // and divided by the measured rate: the warm-up must run at that rate too.
  load.warmupRate ??= load.rate;
  if (values.child) {
    process.stdout.write(JSON.stringify(await measure(load)));
    return;
  }
  const root = instrumentedRoot(values.stacks);
  const out = execFileSync(process.execPath, [SELF, ...process.argv.slice(2), '--child', '1'], { env: { ...process.env, RINDLE_ROOT: root }, maxBuffer: 1 << 24 });
  const { total, perDelta, topStacks } = JSON.parse(out.toString());
  process.stdout.write(`${load.plain ? 'one POST per delta' : 'one streaming append'}, ${load.readers} readers: ${total.toFixed(1)} JS↔wasm crossings per delta\n`);
  for (const [name, n] of perDelta) process.stdout.write(`  ${n.toFixed(2).padStart(7)}  ${name}\n`);
  if (topStacks.length) process.stdout.write(`where ${values.stacks} is called from (share of its calls):\n`);
  for (const [stack, share] of topStacks) process.stdout.write(`  ${(share * 100).toFixed(1).padStart(5)}%  ${stack}\n`);
}

if (process.argv[1] === SELF) {
  main().catch((e) => {
    process.stderr.write(`crossings: ${e.stack ?? e}\n`);
    process.exit(1);
  });
}
