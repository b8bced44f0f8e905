#!/usr/bin/env node
// The runtime objects and garbage collections behind each delta: Linux uprobes on workerd's own
// functions, counted with `perf stat` in the Worker's workerd process while bench.mjs's fan-out
// runs. Counts, not times, so (like bench/crossings.mjs) they do not depend on how busy the
// machine is: two builds or two sides compare exactly. The probes cost a few microseconds a hit,
// so the latency and CPU figures of a run under them are not figures, and none are printed.
// Needs `perf` with uprobe support and root (perf probe writes the kernel's tracing events).
//
//   node bench/objects.mjs --plain --readers 10                    # rindle, the measured window
//   node bench/objects.mjs --side floor,rindle,floorRs --plain --readers 10 --whole
//
// Options: those of bench/compare.mjs's load (--readers, --rate, --seconds, --warmup,
// --warmup-rate, --plain, --var), --side (a comma list, default rindle), --whole (count over the
// whole run, warm-up included, instead of the measured window: collections are rare, and a major
// one in a run collects what the warm-up left).
import { execFileSync } from 'node:child_process';
import { readlinkSync } from 'node:fs';
import { fanout, loadFromArgs, onFreshStack, WARMUP } from './bench.mjs';
import { perfAttached } from './perf-attach.mjs';

/** What is counted: probe name → the (mangled) symbols whose entries count as one of it. */
const PROBES = {
  // A JavaScript wrapper made for one of the runtime's C++ objects (a Request, a Headers, a
  // stream, a reader, …); each is finalized by a major collection once garbage.
  wrappers: /^_ZN7workerd3jsg9Wrappable13attachWrapperEPN2v87Isolate/,
  finalized: /^_ZN7workerd3jsg9Wrappable13detachWrapperEb$/,
  requests: /^_ZN7workerd3api7RequestC[12]ERNS_3jsg4Lock/,
  responses: /^_ZN7workerd3api8ResponseC[12]ERNS_3jsg4Lock/,
  // A Headers the runtime builds (from an HTTP message, as a copy, from a dictionary) …
  headers: /^_ZN7workerd3api7HeadersC[12]ERNS_3jsg4Lock/,
  // … and JavaScript's `new Headers(…)` (with a Headers to copy, one of the above too).
  newHeaders: /^_ZN7workerd3api7Headers11constructorERNS_3jsg4Lock/,
  // V8's global (persistent) handles made and released: the runtime holds each JavaScript
  // value it keeps from C++ (a wrapper, a callback, a promise's continuation) through one.
  globalHandles: /^_ZN2v88internal13GlobalHandles6CreateENS0_6TaggedINS0_6ObjectEEE$/,
  globalHandlesReleased: /^_ZN2v88internal13GlobalHandles9NodeSpaceINS1_4NodeEE7ReleaseEPS3_$/,
  scavenges: /^_ZN2v88internal4Heap8ScavengeEv$/,
  majorCollections: /^_ZN2v88internal4Heap11MarkCompactEv$/,
};
const GROUP = 'rindle_objects';

/** File offsets of the entry points of PROBES in `binary` (a C1/C2 constructor pair shares one). */
function probeOffsets(binary) {
  const segments = execFileSync('readelf', ['-lW', binary]).toString().split('\n').filter((l) => /^\s*LOAD\s/.test(l) && /R E\s/.test(l))
    .map((l) => l.trim().split(/\s+/)).map(([, offset, vaddr, , , memsz]) => ({ offset: Number(offset), vaddr: Number(vaddr), size: Number(memsz) }));
  const toOffset = (vaddr) => {
    const s = segments.find((seg) => vaddr >= seg.vaddr && vaddr < seg.vaddr + seg.size);
    return s ? vaddr - s.vaddr + s.offset : null;
  };
  const symbols = execFileSync('nm', ['--defined-only', binary], { maxBuffer: 1 << 30 }).toString().split('\n');
  const found = {};
  for (const line of symbols) {
    const [address, , name] = line.split(' ');
    if (!name) continue;
    for (const [probe, pattern] of Object.entries(PROBES)) {
      if (!pattern.test(name)) continue;
      const offset = toOffset(Number.parseInt(address, 16));
      if (offset !== null) (found[probe] ??= new Set()).add(offset);
    }
  }
  for (const probe of Object.keys(PROBES)) if (!found[probe]) throw new Error(`objects.mjs: no symbol for ${probe} in ${binary} (another workerd build?)`);
  return found;
}

/** Removes this tool's probes (perf fails when there are none: nothing to do then). */
function removeProbes() {
  try {
    execFileSync('perf', ['probe', '-q', '-d', `${GROUP}:*`], { stdio: 'ignore' });
  } catch {
    // none installed
  }
}

/** The probes installed by this run: on which binary, and their event names. */
let installed = null;

/** Installs the probes on `binary` (replacing any left by an earlier run); their event names.
 * Every side runs the same workerd, so its symbols are read once. */
function installProbes(binary) {
  if (installed?.binary === binary) return installed.events;
  removeProbes();
  const events = [];
  for (const [probe, offsets] of Object.entries(probeOffsets(binary))) {
    [...offsets].forEach((offset, i) => {
      const event = `${probe}_${i}`;
      execFileSync('perf', ['probe', '-q', '-x', binary, '-a', `${GROUP}:${event}=0x${offset.toString(16)}`], { stdio: 'ignore' });
      events.push(`${GROUP}:${event}`);
    });
  }
  installed = { binary, events };
  return events;
}

/** `perf stat -x,` output → counts by probe (the variants of one probe summed). */
function countsOf(stderr) {
  const counts = Object.fromEntries(Object.keys(PROBES).map((p) => [p, 0]));
  for (const line of stderr.split('\n')) {
    const [value, , event] = line.split(',');
    const probe = event?.startsWith(`${GROUP}:`) ? event.slice(GROUP.length + 1).replace(/_\d+$/, '') : null;
    if (probe in counts) counts[probe] += Number(value) || 0;
  }
  return counts;
}

const { load, values } = loadFromArgs(process.argv.slice(2), { seconds: 10, strings: ['side'] });
const whole = values.whole === true;
const rows = [];
try {
  for (const side of (values.side ?? 'rindle').split(',')) {
    const result = await onFreshStack(side, async (target) => {
      const pid = target.stack.workerPid;
      const perf = perfAttached(['stat', '-x', ',', ...installProbes(readlinkSync(`/proc/${pid}/exe`)).flatMap((e) => ['-e', e])]);
      let stderr;
      if (whole) await perf.start(pid);
      const run = await fanout(target, { ...load, during: whole ? undefined : { start: () => perf.start(pid), stop: async () => { stderr = await perf.stop(); } } });
      if (whole) stderr = await perf.stop();
      return { ...run, counts: countsOf(stderr) };
    }, { vars: load.vars });
    const warmupDeltas = (load.warmupSeconds ?? WARMUP.seconds) * (load.warmupRate ?? WARMUP.rate);
    const deltas = whole ? result.deltas + warmupDeltas : result.deltas;
    rows.push({ side, deltas, counts: result.counts });
  }
} finally {
  removeProbes();
}

const perDelta = (n, deltas) => (n / deltas).toFixed(2);
console.log(`${load.plain ? 'one POST per delta' : 'one streaming append'}, ${load.readers} reader${load.readers === 1 ? '' : 's'}, ${load.rate}/s × ${load.seconds} s; ${whole ? 'the whole run, warm-up included' : 'the measured window'}: per delta (the collections: in all)`);
console.log(`| side | deltas | ${Object.keys(PROBES).join(' | ')} | wrappers finalized per major collection |`);
console.log(`|---|---|${Object.keys(PROBES).map(() => '---').join('|')}|---|`);
for (const { side, deltas, counts } of rows) {
  const cells = Object.entries(counts).map(([probe, n]) => (['scavenges', 'majorCollections'].includes(probe) ? String(n) : perDelta(n, deltas)));
  console.log(`| ${side} | ${deltas} | ${cells.join(' | ')} | ${counts.majorCollections ? Math.round(counts.finalized / counts.majorCollections) : '–'} |`);
}
