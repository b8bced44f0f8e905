#!/usr/bin/env node
// What `wrangler dev` adds to every request, counted in instructions (callgrind, as
// bench/instructions.mjs counts them). The benchmark's load goes past the dev proxy, but the
// Worker's own workerd still runs miniflare's entry Worker in front of the user's Worker (the
// `cf` blob parsed and copied into a new Request, the URL rewritten, headers edited), wrangler's
// middleware bundled around it, and, at `--log-level log`, one request log per request: a POST
// from workerd to wrangler's node process. Production has none of it. Both sides of a benchmark
// pay it per request alike, so on the one-POST-per-delta rows it is a common term in rindle's
// and the floor's cost per delivery, which pulls their ratio toward 1 (BENCHMARKS.md,
// "Instructions per delivery").
//
// The same trivial Worker (reads a POST's body and answers a short JSON; answers a GET with an
// event stream) is served twice: under `wrangler dev` as the benchmark runs it, addressed past
// the dev proxy, and by workerd alone with no miniflare around it. Each gets a warm-up, then
// counted windows: sequential POSTs on one kept-alive connection, and event streams. The
// difference, per POST and per event relayed, is the dev stack's own.
//
//   node bench/dev-overhead.mjs [--requests 200] [--warmup 2000] [--reps 3] [--json]
//   node bench/dev-overhead.mjs --cpu            # CPU instead of instructions (1,000 POSTs a window)
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

// --cpu: the same windows timed instead of counted (CPU of the Worker's workerd process, the
// scheduler's count), with the runtime not under valgrind and the POSTs paced at the benchmark's
// 100/s: what the dev stack adds per request in the units of the CPU figures of record.
const CPU = process.argv.includes('--cpu');
// Without --cpu, instructions.mjs sets the environment the stacks run with (workerd under
// callgrind) before bench.mjs and the harness read it: imported first.
const { counted, serveUnderCallgrind } = CPU ? {} : await import('./instructions.mjs');
const { serveAlone } = await import('./workerd-alone.mjs');
const { median, processCpuMs, workerBase } = await import('./bench.mjs');
const { startStack } = await import('../tests/e2e/harness.mjs');

/** The POSTs' pace with --cpu (the benchmark's rate of record), per second. */
const CPU_RATE = 100;

/**
 * A Worker that does as little as a request allows: a POST drains its body and answers; a GET
 * answers an event stream of `?chunks=K` events of 4 characters, one every 5 ms, each written
 * alone (the entry Worker relays a streamed body chunk by chunk: its per-chunk cost is what a
 * reader of the streaming rows pays in development and not in production).
 */
const TRIVIAL = `export default { async fetch(req) {
  if (req.method === 'POST') {
    await req.arrayBuffer();
    return new Response('{"seq":4}', { headers: { 'content-type': 'application/json' } });
  }
  const chunks = Number(new URL(req.url).searchParams.get('chunks') ?? 0);
  const { readable, writable } = new TransformStream();
  const writer = writable.getWriter();
  const event = new TextEncoder().encode('data: abcd\\n\\n');
  (async () => {
    for (let i = 0; i < chunks; i++) {
      await new Promise((r) => setTimeout(r, 5));
      await writer.write(event);
    }
    await writer.close();
  })();
  return new Response(readable, { headers: { 'content-type': 'text/event-stream' } });
} };`;

/** Events per counted stream (the per-event windows). */
const RELAY_CHUNKS = 200;

/**
 * `count` sequential POSTs of a 4-character body to `url`, each answer read in full; with
 * `rate`, the next one not before its due time (as bench.mjs's one-POST-per-delta producer).
 */
async function posts(url, count, rate = null) {
  const start = performance.now();
  for (let i = 0; i < count; i++) {
    const wait = rate === null ? 0 : start + (i * 1000) / rate - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    const r = await fetch(url, { method: 'POST', body: 'abcd', headers: { 'content-type': 'text/plain' } });
    await r.arrayBuffer();
  }
}

/** One event stream of `chunks` events from `base`, read to its end. */
const stream = async (base, chunks) => (await fetch(`${base}/streams/x/sse?chunks=${chunks}`)).text();

/**
 * What `pid` spends over `reps` windows of `work()`: instructions counted by callgrind, or with
 * --cpu microseconds of CPU.
 */
async function windows(pid, reps, work) {
  const totals = [];
  for (let rep = 0; rep < reps; rep++) {
    if (CPU) {
      const before = processCpuMs(pid);
      await work();
      totals.push((processCpuMs(pid) - before) * 1000);
      continue;
    }
    const meter = counted();
    await meter.during.start(pid);
    await work();
    await meter.during.stop();
    totals.push(meter.dump.total);
  }
  return totals;
}

/**
 * On the server at `base` (process `pid`): instructions per POST (windows of `requests` POSTs
 * after `warmup` uncounted) and per relayed event (a stream of RELAY_CHUNKS events less an empty
 * one, over the events).
 */
async function perRequest(pid, base, { requests, warmup, reps }) {
  await posts(`${base}/streams/x/append`, warmup);
  for (let i = 0; i < 20; i++) await stream(base, RELAY_CHUNKS); // the stream's code warmed up too
  const post = (await windows(pid, reps, () => posts(`${base}/streams/x/append`, requests, CPU ? CPU_RATE : null))).map((n) => Math.round(n / requests));
  const empty = median(await windows(pid, reps, () => stream(base, 0)));
  const full = await windows(pid, reps, () => stream(base, RELAY_CHUNKS));
  return { post, event: full.map((n) => Math.round((n - empty) / RELAY_CHUNKS)) };
}

async function main() {
  const { values } = parseArgs({ options: { requests: { type: 'string' }, warmup: { type: 'string' }, reps: { type: 'string' }, json: { type: 'boolean' }, cpu: { type: 'boolean' } } });
  const load = { requests: Number(values.requests ?? (CPU ? 1000 : 200)), warmup: Number(values.warmup ?? 2000), reps: Number(values.reps ?? 3), unit: CPU ? 'µs of CPU' : 'instructions' };
  const dir = mkdtempSync(join(os.tmpdir(), 'rindle-dev-overhead-'));
  writeFileSync(join(dir, 'worker.mjs'), TRIVIAL);
  writeFileSync(join(dir, 'wrangler.toml'), 'name = "rindle-bench-trivial"\nmain = "worker.mjs"\ncompatibility_date = "2026-04-20"\n');

  const stack = await startStack({ name: 'bench-trivial', config: join(dir, 'wrangler.toml') });
  let dev;
  try {
    const { base, direct, pid } = await workerBase(stack);
    if (!direct) throw new Error('the Worker\'s own socket was not found past the dev proxy');
    dev = await perRequest(pid, base, load);
  } finally {
    await stack.stop();
  }
  const bare = CPU ? await serveAlone(TRIVIAL) : await serveUnderCallgrind(TRIVIAL);
  let alone;
  try {
    alone = await perRequest(bare.pid, bare.url, load);
  } finally {
    bare.stop();
  }
  const report = {
    load,
    wranglerDev: dev,
    workerdAlone: alone,
    devOnlyPerPost: median(dev.post) - median(alone.post),
    devOnlyPerEvent: median(dev.event) - median(alone.event),
  };
  if (values.json) {
    console.log(JSON.stringify(report, null, 2));
    return;
  }
  const fmt = (xs) => xs.map((x) => x.toLocaleString('en')).join(', ');
  console.log(`${load.unit} of a trivial Worker (${CPU ? `schedstat; POSTs at ${CPU_RATE}/s` : 'callgrind'}), ${load.reps} windows each, after ${load.warmup} POSTs uncounted`);
  console.log(`  per POST (windows of ${load.requests}):  under wrangler dev, past its proxy ${fmt(dev.post)}; workerd alone ${fmt(alone.post)}`);
  console.log(`  per event of a stream of ${RELAY_CHUNKS}:     under wrangler dev, past its proxy ${fmt(dev.event)}; workerd alone ${fmt(alone.event)}`);
  console.log(`  the dev stack's own: ${report.devOnlyPerPost.toLocaleString('en')} per POST, ${report.devOnlyPerEvent.toLocaleString('en')} per event relayed`);
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
