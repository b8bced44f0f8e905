#!/usr/bin/env node
// The benchmark: rindle-streams and a JavaScript floor (bench/floor/floor.mjs, a Durable
// Object that only forwards the producer's bytes to its readers as SSE) driven by the same
// load, in the same run, on the same local runtime (wrangler dev = workerd), on loopback.
// Every figure is reported absolutely and, where the floor does the same work, as a ratio.
//
//   node bench/bench.mjs            # the full run (≈10 min): what BENCHMARKS.md reports
//   node bench/bench.mjs --smoke    # seconds per scenario: the harness cannot rot (in the test command)
//   node bench/bench.mjs --json     # the report as JSON on stdout
//   node bench/bench.mjs --only latency,d1   # a subset (latency, plain, ui, maxRate, d1, memory, variants)
//   node bench/bench.mjs --pairs 3           # the latency and plain rows as medians of 3 alternating pairs
//   node bench/bench.mjs --pairs 3 --warmup 20 --warmup-rate 1000   # the latency and plain rows after a heavier warm-up
//   node bench/bench.mjs --bare     # every stack served by bench/bare-serve.mjs: no entry Worker or dev middleware per request
//
// Build the Worker first (scripts/build.sh --dev; the test command does). Scenarios:
//   latency   1 stream, R readers (1, 10, 100), 4-UTF-16-unit deltas at 100/s through one
//             streaming append; push→reader latency p50/p99; workerd CPU per 1,000
//             deliveries (a delivery = one delta reaching one reader) and per 1,000 deltas
//   plain     the same with one POST per delta (each sent once the previous one is answered,
//             on one kept-alive connection): also the deltas/s achieved and the append's
//             round trip
//   ui        the same answer as a `ui` stream (one NDJSON text-delta line per delta, read from
//             /ui) and as a `text` stream: CPU per delivery and p99 at 1, 10, 100 readers,
//             and D1 bytes per byte of the answer
//   max-rate  the highest delta rate one stream sustains with 100 readers before p99 > 100 ms
//   d1        statements, rows and bytes written per 10,000 characters (counted at the
//             executor, from /stats), for 10k, 100k and 1M characters; and the flush round
//             trip (one delta appended, then POST /flush) with D1 round trips per checkpoint
//   memory    memory per 100 live streams (a reader and 2 KB of text each): workerd resident
//             memory, the JS heap, the wasm heap; against the floor, the floor that also does
//             what the lease does (stores a key, sets an alarm), and that one plus a D1 query
//   variants  before/after: pull-time merging off (MERGE_QUEUED_CHUNKS=0), reader pacing off
//             (READER_PACING_US=0), checkpoints per delta (CHECKPOINT_CHARS=1)
// The load goes to each Worker's own socket inside wrangler dev, past its dev proxy (a second
// workerd relaying every request over fresh loopback connections, which production does not
// have and which runs out of file descriptors at 100 readers). Each stack's inspector Network
// domain is turned off first (bench/inspector.mjs: with it on, the runtime reports every
// request and every chunk written to a reader to wrangler's inspector proxy, which costs more
// than the Worker itself). CPU and memory come from /proc, summed over the stack's workerd
// processes (the dev proxy's too, on both sides).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { gzipSync } from 'node:zlib';
import { ROOT, sseParser, startStack } from '../tests/e2e/harness.mjs';

/** The store executor's counters in /stats: `d1`, or `postgres` (RINDLE_E2E_BACKEND=postgres). */
const storeOf = (stats) => stats.d1 ?? stats.postgres;
import { rawRequest, sleep } from '../tests/e2e/util.mjs';
import { connectInspector, quietInspector } from './inspector.mjs';

/**
 * A measured delta that reached every reader more than this late was stalled before the
 * fan-out: about 3× the p50 of a quiet run (0.7–1 ms), past any one write's cost. With N
 * readers such a stall is N latency samples at once, so a 10-reader p99 (90 samples in 10 s) is
 * set by about the 9th-worst stall of the run: `stalls` counts them.
 */
const STALL_MS = 3;
const DELTAS = ['tok ', 'ab😀', '漢字ab', '👍🏽', 'the ', '🦀ok', 'é é ', '𝄞 a '];
const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;

// ---------------------------------------------------------------------------------------
// The runtime's processes

/** What a workerd process is called. */
const WORKERD_NAMES = new Set(['workerd']);

/** The workerd processes of process group `pgid`: { pid, stat fields after the name }. */
function workerdProcesses(pgid) {
  const found = [];
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (WORKERD_NAMES.has(comm) && Number(fields[2]) === pgid) found.push({ pid, fields });
  }
  return found;
}

/**
 * CPU time (ms) of process `pid`: the scheduler's own count (schedstat, nanoseconds) summed
 * over its threads. utime/stime are sampled at 10 ms ticks, which puts ±10% of noise on the
 * ~1 s a scenario costs; `stat` (ticks) is the fallback where schedstat is missing.
 */
export function processCpuMs(pid, statFields) {
  try {
    let ns = 0;
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      try {
        ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
      } catch {
        /* thread gone meanwhile */
      }
    }
    return ns / 1e6;
  } catch {
    const fields = statFields ?? readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLK_TCK;
  }
}

/** CPU (ms) and memory (KiB) of the workerd processes of process group `pgid`. */
export function workerdUsage(pgid) {
  let cpuMs = 0;
  let rssKb = 0;
  let hwmKb = 0;
  let processes = 0;
  for (const { pid: name, fields: f } of workerdProcesses(pgid)) {
    processes++;
    cpuMs += processCpuMs(name, f);
    try {
      const status = readFileSync(`/proc/${name}/status`, 'utf8');
      rssKb += Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
      hwmKb += Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0);
    } catch {
      /* gone meanwhile */
    }
  }
  return { cpuMs, rssKb, hwmKb, processes };
}

/** TCP ports process `pid` listens on (from its socket fds and /proc/net/tcp). */
function listeningPorts(pid) {
  const inodes = new Set();
  try {
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (m) inodes.add(m[1]);
      } catch {
        /* closed meanwhile */
      }
    }
  } catch {
    return [];
  }
  const ports = [];
  for (const line of readFileSync('/proc/net/tcp', 'utf8').split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length > 9 && f[3] === '0A' && inodes.has(f[9])) ports.push(parseInt(f[1].split(':')[1], 16));
  }
  return ports;
}

/**
 * The Worker's own socket inside `wrangler dev`, behind its dev proxy. The proxy is a second
 * workerd that relays every request over fresh loopback connections (at 100 readers it runs
 * out of file descriptors); production has no such hop. The Worker's socket is the one port
 * of the stack's workerd processes, other than the public one, that answers a probe exactly
 * as the public one does. Falls back to the public URL.
 */
export async function workerBase(stack) {
  if (stack.bare) {
    // bench/bare-serve.mjs: the public port is the Worker's own socket, and one workerd serves it.
    const [worker, ...more] = workerdProcesses(stack.process.pgid);
    if (!worker || more.length) throw new Error(`a bare stack runs one workerd, found ${more.length + (worker ? 1 : 0)}`);
    return { base: stack.baseUrl, direct: true, pid: Number(worker.pid) };
  }
  const probe = async (base) => {
    const r = await request(`${base}/streams/bench-probe/text`, { timeoutMs: 2000 });
    return `${r.status} ${r.raw}`;
  };
  const expected = await probe(stack.baseUrl);
  for (const { pid } of workerdProcesses(stack.process.pgid)) {
    for (const port of listeningPorts(pid)) {
      if (port === stack.port) continue;
      const base = `http://127.0.0.1:${port}`;
      if ((await probe(base)) === expected) return { base, direct: true, pid: Number(pid) };
    }
  }
  return { base: stack.baseUrl, direct: false, pid: null };
}

/** CPU (ms) of every process of group `pgid` (wrangler's node process included). */
function groupCpuMs(pgid) {
  let ms = 0;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(f[2]) === pgid) ms += ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK;
    } catch {
      /* gone meanwhile */
    }
  }
  return ms;
}

/** Waits until `stacks` are idle (under 5% of a core over 500 ms; at most 30 s) after start-up. */
async function quiet(stacks) {
  const cpu = () => stacks.reduce((sum, st) => sum + groupCpuMs(st.process.pgid), 0);
  const end = Date.now() + 30_000;
  for (let before = cpu(); Date.now() < end; ) {
    await sleep(500);
    const now = cpu();
    if (now - before < 25) return;
    before = now;
  }
}

// ---------------------------------------------------------------------------------------
// Latency bookkeeping

/** The `p`th percentile of the ascending `sorted` (nearest rank); null for no samples. */
function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

/**
 * The `p`th percentile of several fan-out runs' latency samples together (rounded as a run's
 * own), or null when a run does not carry them. A run's p99 is its 1%-worst samples, and with N
 * readers one stall is N of them (see STALL_MS): a 10-reader p99 from one 10 s run rests on about
 * 9 stalls, the median of three such p99s on hardly more. Pooled, it rests on all of them
 * together; this is the p99 the targets are read from.
 */
export function pooledPercentile(runs, p) {
  if (!runs.every((r) => r.latencies)) return null;
  return round(percentile(runs.flatMap((r) => r.latencies).sort((a, b) => a - b), p));
}

export const round = (x, digits = 1) => (x === null || x === undefined ? null : Math.round(x * 10 ** digits) / 10 ** digits);

// ---------------------------------------------------------------------------------------
// The two targets: the same load against either

/** One request on its own connection; { status, raw, json } (status 0 and the error in `raw` when it failed). */
async function request(url, { method = 'GET', headers = {}, body, timeoutMs = 30_000 } = {}) {
  const { origin, pathname, search } = new URL(url);
  const r = await rawRequest(origin, { method, path: pathname + search, headers, body, timeoutMs });
  return { ...r, raw: r.raw ?? r.error };
}

let streamCounter = 0;

/**
 * rindle-streams: rows in D1, JWTs, JSON frames whose `seq` says how far a reader is. With
 * `format: 'ui'` (SPEC §9) the same answer travels as the AI SDK's UI message chunks: each
 * delta is one `text-delta` line of NDJSON, read from `/ui`, whose events carry the offset
 * after their line as `id:`.
 */
export function rindleTarget(stack, base, { format = 'text' } = {}) {
  const ui = format === 'ui';
  return {
    name: ui ? 'rindle ui' : 'rindle',
    stack,
    /** What the producer sends for one delta of the answer. */
    encode: ui ? (delta) => `${JSON.stringify({ type: 'text-delta', id: 't0', delta })}\n` : (delta) => delta,
    async open() {
      const id = `bench-${process.pid}-${++streamCounter}`;
      stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES (?, 'bench', 'assistant')`, id);
      const token = stack.token(id);
      const auth = { authorization: `Bearer ${token}` };
      const url = (action, query = '') => `${base}/streams/${id}/${action}${query}`;
      const stats = async () => (await request(url('stats'), { headers: auth })).json;
      const opened = await request(url('open'), { method: 'POST', headers: auth, ...(ui ? { body: '{"format":"ui"}' } : {}) });
      if (opened.status !== 200) throw new Error(`open ${id}: ${opened.status} ${opened.raw}`);
      return {
        id,
        appendUrl: url('append'),
        flushUrl: url('flush'),
        producerHeaders: { ...auth, 'content-type': ui ? 'application/x-ndjson' : 'text/plain; charset=utf-8' },
        eventsUrl: url(ui ? 'ui' : 'events', `?from=0&token=${encodeURIComponent(stack.token(id, 'read'))}`),
        close: () => request(url('close'), { method: 'POST', headers: auth }),
        stats,
        checkpoints: async () => (await stats()).checkpoints,
      };
    },
    /**
     * A reader's handler of SSE events: it follows the `id:` line (a chunk's `seq`) and calls
     * onUnits(UTF-16 units received). Only `checked` readers parse the JSON and check contract
     * S (contiguous chunks, text.length == seq - from), so that with 100 readers on two cores
     * the client is not what gets measured.
     */
    reader(onUnits, onViolation, checked) {
      let seq = 0;
      return ({ id, data }) => {
        if (id === undefined) return; // durable, end: nothing delivered
        if (checked && data.startsWith('{"type":"chunk"')) {
          const f = JSON.parse(data);
          if (f.from !== seq || f.seq - f.from !== f.text.length) onViolation(`chunk ${f.from}..${f.seq} after ${seq}`);
        }
        seq = Number(id);
        onUnits(seq);
      };
    },
  };
}

/** The floor: no auth, no open; each `data:` frame is raw produced text. */
export function floorTarget(stack, base) {
  return {
    name: 'floor',
    stack,
    async open() {
      const id = `floor-${process.pid}-${++streamCounter}`;
      const url = (action) => `${base}/streams/${id}/${action}`;
      return {
        id,
        appendUrl: url('append'),
        producerHeaders: { 'content-type': 'text/plain; charset=utf-8' },
        eventsUrl: url('events'),
        close: () => request(url('close'), { method: 'POST' }),
        stats: async () => null,
        // Rounds run by the floor that checkpoints (FLOOR_CHECKPOINTS=1), else 0; the Rust
        // floor, which never checkpoints, answers 404.
        checkpoints: async () => {
          const r = await request(url('stats'));
          return r.status === 200 ? r.json.checkpoints : 0;
        },
      };
    },
    reader(onUnits) {
      let units = 0;
      return ({ event, data }) => {
        if (event !== undefined) return; // `event: end`
        units += data.length;
        onUnits(units);
      };
    },
  };
}

/** An SSE reader on its own connection; `onEvent({ id, event, data })` per event. Resolves once connected. */
function attachReader(url, onEvent) {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent: false, headers: { accept: 'text/event-stream' } }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`events: ${res.statusCode}`));
      res.setEncoding('utf8');
      const parser = sseParser((record) => record.data !== undefined && onEvent(record), { json: false });
      res.on('data', (chunk) => parser.push(chunk));
      res.on('error', () => {});
      resolve({ close: () => req.destroy() });
    });
    req.on('error', reject);
  });
}

/**
 * One POST per delta on one kept-alive connection: `post(text)` resolves when the append is
 * answered; `roundTrips` are their times (ms).
 */
function plainProducer(stream) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const roundTrips = [];
  let refused = null;
  const post = (text) =>
    new Promise((resolve) => {
      const sentAt = performance.now();
      const body = Buffer.from(text);
      const req = http.request(stream.appendUrl, { method: 'POST', agent, headers: { ...stream.producerHeaders, 'content-length': body.length } });
      req.on('response', (res) => {
        let raw = '';
        res.setEncoding('utf8');
        res.on('data', (c) => (raw += c));
        res.on('end', () => {
          roundTrips.push(performance.now() - sentAt);
          if (res.statusCode !== 200) refused ??= { status: res.statusCode, raw };
          resolve();
        });
      });
      req.on('error', (e) => {
        refused ??= { status: 0, raw: e.message };
        resolve();
      });
      req.end(body);
    });
  /** Closes the connection; the first refusal, or 200. */
  const finish = () => {
    agent.destroy();
    return refused ?? { status: 200 };
  };
  return { roundTrips, post, finish };
}

/** A streaming append (chunked, no content-length) that stays open until `end()`. */
function openAppend(stream) {
  const req = http.request(stream.appendUrl, { method: 'POST', agent: false, headers: { ...stream.producerHeaders, 'transfer-encoding': 'chunked' } });
  const answer = new Promise((resolve) => {
    req.on('response', (res) => {
      let raw = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (raw += c));
      res.on('end', () => resolve({ status: res.statusCode, raw }));
    });
    req.on('error', (e) => resolve({ status: 0, raw: e.message }));
  });
  req.setNoDelay?.(true);
  req.flushHeaders();
  return { write: (text) => req.write(text), end: () => req.end(), answer };
}

// ---------------------------------------------------------------------------------------
// Scenarios

/**
 * `promise`'s value, or `late` once `ms` have passed. The timer is cleared either way: left
 * pending (a `sleep` in a race), it kept each compare.mjs child process (one run) alive for the
 * whole bound, 30 s after every 10 s fan-out.
 */
function within(promise, ms, late) {
  let timer;
  const deadline = new Promise((resolve) => (timer = setTimeout(() => resolve(late), ms)));
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

/**
 * The unmeasured load before each fan-out measurement (see `fanout`): 20 s at 1,000 deltas/s,
 * 20,000 deltas. With 10 s at the measured 100/s, V8 was still compiling rindle-streams' wasm
 * to its top tier inside the measured window (docs/PERFORMANCE.md, "Where the time goes").
 */
export const WARMUP = { seconds: 20, rate: 1000 };

/**
 * The lighter warm-up of the rows that do not compare per-request cost with the floor (`ui`,
 * `maxRate`, `variants`): 10 s at the measured rate, as before the warm-up of record grew.
 */
const LIGHT_WARMUP_SECONDS = 10;

/**
 * One stream, `readers` readers, `rate` deltas/s for `seconds` (deltas of 4 UTF-16 units).
 * `plain`: one POST per delta instead of one streaming append, each sent when due but not
 * before the previous one was answered (so the rate achieved says whether the append path
 * keeps up). Returns latency percentiles (the first 10% of deltas are warm-up and not
 * counted), deliveries, CPU and violations. `during` ({ start, stop }) brackets the measured
 * window (bench/profile.mjs takes its CPU profile there).
 */
export async function fanout(target, { readers, rate, seconds, plain = false, during, warmupSeconds = WARMUP.seconds, warmupRate = WARMUP.rate }) {
  // The same load on a stream of its own first, unmeasured: a fresh runtime compiles its hot
  // code as it goes, on background threads whose CPU would otherwise land on the measurement
  // (±25% from run to run without it). What is measured is a warm isolate, as in production
  // where one serves many requests: after a 2 s warm-up, V8 was still tiering the wasm up
  // (Turboshaft compiles were 5.5% of workerd's perf samples during a plain 1-reader run;
  // the floor's JavaScript compiles 0.8%), and V8 tiers a wasm function up only after it has
  // run a budget of code: after 10 s at 100 deltas/s, Turboshaft was still compiling rindle's
  // wasm in the measured window, and its baseline tier's frame set-ups were 3% of the samples.
  // So the warm-up runs faster than the measurement (`warmupRate`, default 1,000/s; --warmup-rate)
  // for 20 s (docs/PERFORMANCE.md, "Where the time goes").
  if (warmupSeconds > 0) await fanout(target, { readers: Math.min(readers, 10), rate: warmupRate, seconds: warmupSeconds, plain, warmupSeconds: 0 });
  const stream = await target.open();
  const total = Math.max(1, Math.round(rate * seconds));
  const sentAt = new Float64Array(total);
  const endUnits = new Float64Array(total);
  const warmup = Math.floor(total / 10);
  const latencies = [];
  // Each delta's earliest arrival at any reader: a delta late to every reader at once was held
  // up before the fan-out (the whole process, or the machine), not by one reader's write.
  const earliest = new Float64Array(total).fill(Infinity);
  let violations = 0;
  let delivered = 0;
  const progress = [];
  let sent = 0;
  let finished = 0;
  let allDone;
  const done = new Promise((r) => (allDone = r));
  const conns = [];
  for (let i = 0; i < readers; i++) {
    const state = { next: 0 };
    progress.push(state);
    const onUnits = (units) => {
      const now = performance.now();
      while (state.next < sent && endUnits[state.next] <= units) {
        if (state.next >= warmup) latencies.push(now - sentAt[state.next]);
        earliest[state.next] = Math.min(earliest[state.next], now - sentAt[state.next]);
        state.next++;
        delivered++;
      }
      if (state.next === total) {
        state.next++; // count once
        if (++finished === readers) allDone();
      }
    };
    conns.push(await attachReader(stream.eventsUrl, target.reader(onUnits, () => violations++, i === 0)));
  }
  await sleep(200); // every reader attached and parked
  // Read outside `during`, so that a profile's window holds the load only.
  const checkpointsBefore = await stream.checkpoints();
  await during?.start();
  const before = workerdUsage(target.stack.process.pgid);
  const workerBefore = target.stack.workerPid ? processCpuMs(target.stack.workerPid) : null;
  const clientBefore = process.cpuUsage();
  // Plain: one POST per delta, each sent once the previous one was answered (a producer that
  // cannot hold a request open still keeps its deltas in order), on one kept-alive connection.
  const producer = plain ? plainProducer(stream) : openAppend(stream);
  let units = 0;
  const start = performance.now();
  while (sent < total) {
    const due = start + (sent * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 1) await sleep(wait);
    const text = target.encode?.(DELTAS[sent % DELTAS.length]) ?? DELTAS[sent % DELTAS.length];
    units += text.length;
    endUnits[sent] = units;
    sentAt[sent] = performance.now();
    sent++;
    if (plain) await producer.post(text);
    else producer.write(text);
  }
  const elapsed = (performance.now() - start) / 1000;
  // Deliveries still in flight get a grace period; a run that needs longer did not keep up.
  const outcome = await within(done.then(() => 'done'), Math.max(10_000, seconds * 3000), 'timeout');
  const after = workerdUsage(target.stack.process.pgid);
  const workerCpuMs = workerBefore === null ? null : processCpuMs(target.stack.workerPid) - workerBefore;
  const client = process.cpuUsage(clientBefore);
  await during?.stop();
  const checkpoints = (await stream.checkpoints()) - checkpointsBefore;
  const drainedAfter = (performance.now() - start) / 1000 - elapsed;
  const deliveredInWindow = delivered;
  const answered = plain ? producer.finish() : (producer.end(), await producer.answer);
  if (answered.status !== 200) throw new Error(`${target.name} append: ${answered.status} ${answered.raw}`);
  const stats = await stream.stats();
  await stream.close();
  for (const c of conns) c.close();
  latencies.sort((a, b) => a - b);
  const cpuMs = after.cpuMs - before.cpuMs;
  const result = {
    target: target.name,
    readers,
    rate,
    plain,
    deltas: total,
    achievedRate: round(total / elapsed),
    deliveries: deliveredInWindow,
    expectedDeliveries: total * readers,
    drainSeconds: round(drainedAfter, 2),
    ...(plain ? { appendP50: round(percentile(producer.roundTrips.sort((a, b) => a - b), 50)), appendP99: round(percentile(producer.roundTrips, 99)) } : {}),
    clientCpuMs: round((client.user + client.system) / 1000),
    // rindle-streams counts its writes to readers; the floor writes once per delta per reader.
    writesPer1000Deliveries: round(((stats ? stats.readerWrites - readers : total * readers) * 1000) / Math.max(1, deliveredInWindow), 1),
    complete: outcome === 'done',
    violations,
    p50: round(percentile(latencies, 50)),
    p99: round(percentile(latencies, 99)),
    max: round(latencies.at(-1)),
    cpuMs: round(cpuMs),
    // The Worker's own workerd process (the rest of `cpuMs` is the idle dev proxy's).
    workerCpuMs: round(workerCpuMs),
    workerCpuMsPer1000Deliveries: workerCpuMs === null ? null : round((workerCpuMs * 1000) / Math.max(1, deliveredInWindow), 2),
    cpuMsPer1000Deliveries: round((cpuMs * 1000) / Math.max(1, deliveredInWindow), 2),
    cpuMsPer1000Deltas: round((cpuMs * 1000) / total, 2),
    // Checkpoint rounds in the measured window (each side's own count).
    checkpoints,
    stalls: earliest.subarray(warmup).filter((l) => l > STALL_MS && l !== Infinity).length,
  };
  // The samples themselves, for percentiles over several runs (`--pairs`); kept out of JSON.
  Object.defineProperty(result, 'latencies', { value: latencies, enumerable: false });
  return result;
}

/** `KEY=VALUE` settings (`--var`s, a compared root's or side's `@`s) as an object of variables. */
export const varsOf = (settings) => Object.fromEntries(settings.map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));

/**
 * The fan-out load named on a command line (bench/profile.mjs, bench/compare.mjs):
 * --readers N, --rate N (deltas/s), --seconds N, --warmup N (seconds), --warmup-rate N (deltas/s;
 * default the measured rate), --plain, --var KEY=VALUE (repeatable). The
 * tools' own options come back in `values`: `strings` take a value, anything else is a flag.
 */
export function loadFromArgs(args, { seconds = 5, strings = [] } = {}) {
  const options = { var: { type: 'string', multiple: true } };
  for (const name of ['readers', 'rate', 'seconds', 'warmup', 'warmup-rate', ...strings]) options[name] = { type: 'string' };
  const { values } = parseArgs({ args, strict: false, options });
  const vars = varsOf(values.var ?? []);
  const load = { readers: Number(values.readers ?? 1), rate: Number(values.rate ?? 100), seconds: Number(values.seconds ?? seconds), plain: values.plain === true, vars };
  if (values.warmup !== undefined) load.warmupSeconds = Number(values.warmup);
  if (values['warmup-rate'] !== undefined) load.warmupRate = Number(values['warmup-rate']);
  return { load, values };
}

/** How long d1Traffic waits for a finished streaming append's answer. */
const APPEND_ANSWER_MS = 60_000;

/**
 * D1 traffic for an answer of `chars` UTF-16 units written as fast as the append takes them
 * (for a `ui` target, as one `text-delta` line per piece: `bytesPerTextByte` is per byte of the
 * answer, `bytesPerWireByte` per byte the producer sent).
 */
async function d1Traffic(target, { chars, pieceUnits = 64, appendBytes = 256 * 1024 }) {
  const stream = await target.open();
  let text = '';
  let wireBytes = 0;
  let k = 0;
  // Streaming appends of at most `appendBytes` each (an append is capped by MAX_APPEND_BYTES).
  while (text.length < chars) {
    const producer = openAppend(stream);
    let bytes = 0;
    while (text.length < chars && bytes < appendBytes) {
      let piece = '';
      while (piece.length < pieceUnits) piece += DELTAS[k++ % DELTAS.length];
      text += piece;
      const wire = target.encode?.(piece) ?? piece;
      bytes += Buffer.byteLength(wire);
      wireBytes += Buffer.byteLength(wire);
      if (!producer.write(wire)) await new Promise((r) => setImmediate(r));
    }
    producer.end();
    // Bounded: a smoke run once waited here past its own timeout (a ui stream, after a fan-out
    // on the same stack); a missing answer fails with what the object says of the stream.
    const appended = await within(producer.answer, APPEND_ANSWER_MS, null);
    if (appended === null) {
      const stats = await stream.stats().catch((e) => `stats failed: ${e.message}`);
      throw new Error(`append: no answer within ${APPEND_ANSWER_MS} ms after ${bytes} bytes (${text.length} units so far); the stream's stats: ${JSON.stringify(stats)}`);
    }
    if (appended.status !== 200) throw new Error(`append: ${appended.status} ${appended.raw}`);
  }
  const closed = await stream.close();
  if (closed.status !== 200) throw new Error(`close: ${closed.status} ${closed.raw}`);
  const stats = await stream.stats();
  const textBytes = Buffer.byteLength(text);
  const per10k = (x) => round((x * 10_000) / text.length, 1);
  return {
    chars: text.length,
    textBytes,
    statements: storeOf(stats).statements,
    writeStatements: storeOf(stats).writeStatements,
    rowsWritten: storeOf(stats).rowsWritten,
    bytesBound: storeOf(stats).bytesBound,
    statementsPer10k: per10k(storeOf(stats).statements),
    rowsPer10k: per10k(storeOf(stats).rowsWritten),
    bytesPer10k: per10k(storeOf(stats).bytesBound),
    bytesPerTextByte: round(storeOf(stats).bytesBound / textBytes, 2),
    bytesPerWireByte: round(storeOf(stats).bytesBound / wireBytes, 2),
    checkpoints: stats.checkpoints,
  };
}

/**
 * How long a producer waits for durability: `flushes` times, one delta appended (one POST),
 * then `POST /flush`, answered once D1 confirms everything produced. Also the D1 round trips
 * per checkpoint (each flush forces one), counted at the executor past the warm-up.
 */
export async function flushRoundTrip(target, { flushes, warmup = 20 }) {
  const stream = await target.open();
  const post = async (url, body) => {
    const headers = { ...stream.producerHeaders, 'content-length': Buffer.byteLength(body ?? '') };
    const r = await request(url, { method: 'POST', headers, body });
    if (r.status !== 200) throw new Error(`${url}: ${r.status} ${r.raw}`);
    return r.json;
  };
  const times = [];
  let warm;
  for (let i = 0; i < warmup + flushes; i++) {
    if (i === warmup) warm = await stream.stats();
    await post(stream.appendUrl, DELTAS[i % DELTAS.length]);
    const start = performance.now();
    const flushed = await post(stream.flushUrl);
    if (flushed.durableSeq !== flushed.seq) throw new Error(`flush answered 200 short of the text: ${JSON.stringify(flushed)}`);
    if (i >= warmup) times.push(performance.now() - start);
  }
  const end = await stream.stats();
  await stream.close();
  times.sort((a, b) => a - b);
  const checkpoints = end.checkpoints - warm.checkpoints;
  // A build from before the `rounds` counter reports none.
  const rounds = storeOf(end).rounds === undefined ? null : storeOf(end).rounds - storeOf(warm).rounds;
  return { flushes, p50: round(percentile(times, 50), 2), p99: round(percentile(times, 99), 2), checkpoints, d1RoundsPerCheckpoint: rounds === null ? null : round(rounds / checkpoints, 2) };
}

/** D1 statements per delta for `deltas` 4-unit deltas at `rate`/s (the per-delta work check). */
async function d1PerDelta(target, { deltas, rate }) {
  const stream = await target.open();
  const producer = openAppend(stream);
  const start = performance.now();
  for (let i = 0; i < deltas; i++) {
    const wait = start + (i * 1000) / rate - performance.now();
    if (wait > 1) await sleep(wait);
    producer.write(DELTAS[i % DELTAS.length]);
  }
  producer.end();
  await producer.answer;
  const live = await stream.stats(); // before the seal: checkpoint traffic only
  await stream.close();
  return { deltas, rate, statements: storeOf(live).statements, statementsPerDelta: round(storeOf(live).statements / deltas, 3), checkpoints: live.checkpoints };
}

/**
 * Memory with `streams` live streams (a reader and ~2 KB of text, its streaming append held
 * open, each): the resident memory of the stack's workerd processes (all, and the Worker's own
 * process), the isolate's JavaScript heap, and for rindle-streams the wasm heap in use and
 * reserved (`/stats` `wasmHeap`, counted at the allocator). Each figure is per 100 streams.
 *
 * Two batches of `streams` on the same stack, the second opened while the first is still live:
 * the first, on an isolate that has served one stream, also pays what the isolate grows once
 * (code compiled as it gets hot, heap and allocator pools); the second is what each further
 * live stream costs, the figure of record (`mbPer100Streams`).
 */
async function memory(target, { streams }) {
  const text = DELTAS.join('').repeat(Math.ceil(2000 / DELTAS.join('').length)).slice(0, 2000);
  const openLive = async (n) => {
    const live = [];
    for (let i = 0; i < n; i++) {
      const s = await target.open();
      const conn = await attachReader(s.eventsUrl, () => {});
      const p = openAppend(s);
      p.write(text);
      live.push({ s, conn, p });
    }
    return live;
  };
  const closeAll = async (live) => {
    for (const { s, conn, p } of live) {
      p.end();
      await p.answer;
      await s.close();
      conn.close();
    }
  };
  const { pgid } = target.stack.process;
  // Resident memory of one process (kB), and its split: anonymous (heaps: V8's, wasm's, the
  // runtime's allocations) and file-backed or shared (mapped files, e.g. SQLite's).
  const rssOf = (pid) => {
    try {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      const kb = (name) => Number(new RegExp(`${name}:\\s+(\\d+)`).exec(status)?.[1] ?? 0);
      return { rss: kb('VmRSS'), anon: kb('RssAnon'), mapped: kb('RssFile') + kb('RssShmem') };
    } catch {
      return { rss: 0, anon: 0, mapped: 0 };
    }
  };
  const snapshot = async (probe) => {
    await sleep(1000); // what was just opened or closed settles before memory is read
    // The isolate's JavaScript heap as V8 counts it. No forced collection: workerd answers
    // HeapProfiler.collectGarbage only when the isolate next runs, and not at all while
    // streams are held open, so this figure includes garbage and is the noisiest.
    const session = await connectInspector(target.stack.inspectorPort);
    let jsHeap;
    try {
      jsHeap = await session.send('Runtime.getHeapUsage');
    } finally {
      await session.close();
    }
    const wasmHeap = (await probe.stats())?.wasmHeap ?? null;
    return { all: workerdUsage(pgid), worker: target.stack.workerPid ? rssOf(target.stack.workerPid) : null, jsHeapBytes: jsHeap.usedSize, wasmHeap };
  };
  // The first stream instantiates the code, the D1 database and storage. The probe stays open
  // throughout: its `/stats` reads the isolate's wasm heap.
  await closeAll(await openLive(1));
  const probe = await target.open();
  // Two batches, the first held open while the second opens (so the second cannot reuse
  // memory the first gave back): what each further live stream costs, after what the isolate
  // grows once (code compiled as it gets hot, heap and allocator pools) went to the first.
  const start = await snapshot(probe);
  const firstLive = await openLive(streams);
  const base = await snapshot(probe);
  const secondLive = await openLive(streams);
  const held = await snapshot(probe);
  await closeAll([...firstLive, ...secondLive]);
  const first = { before: start, held: base };
  const per100 = (before, after, unit) => (before === null || after === null ? null : round(((after - before) / unit) * (100 / streams)));
  const MB = 1024 * 1024;
  return {
    target: target.name,
    streams,
    baseMb: round(base.all.rssKb / 1024),
    heldMb: round(held.all.rssKb / 1024),
    peakMb: round(held.all.hwmKb / 1024),
    firstBatchMbPer100Streams: per100(first.before.all.rssKb, first.held.all.rssKb, 1024),
    mbPer100Streams: per100(base.all.rssKb, held.all.rssKb, 1024),
    workerProcessMbPer100Streams: per100(base.worker?.rss ?? null, held.worker?.rss ?? null, 1024),
    workerProcessAnonMbPer100Streams: per100(base.worker?.anon ?? null, held.worker?.anon ?? null, 1024),
    workerProcessMappedMbPer100Streams: per100(base.worker?.mapped ?? null, held.worker?.mapped ?? null, 1024),
    jsHeapMbPer100Streams: per100(base.jsHeapBytes, held.jsHeapBytes, MB),
    wasmHeapInUseMbPer100Streams: per100(base.wasmHeap?.inUseBytes ?? null, held.wasmHeap?.inUseBytes ?? null, MB),
    wasmMemoryMbPer100Streams: per100(base.wasmHeap?.memoryBytes ?? null, held.wasmHeap?.memoryBytes ?? null, MB),
  };
}

/** The wasm the stacks serve (the dev build), raw and gzipped, and (when wasm-bindgen is at hand) before wasm-opt. */
function wasmSize() {
  const file = join(ROOT, 'build-dev', 'index_bg.wasm');
  const bytes = readFileSync(file);
  const out = { raw: bytes.length, gzip: gzipSync(bytes, { level: 9 }).length };
  const cargoWasm = join(ROOT, 'target', 'wasm32-unknown-unknown', 'release', 'rindle_streams.wasm');
  if (existsSync(cargoWasm) && statSync(cargoWasm).mtimeMs <= statSync(file).mtimeMs + 120_000) {
    const dir = mkdtempSync(join(os.tmpdir(), 'rindle-bench-wasm-'));
    try {
      execFileSync('wasm-bindgen', ['--target', 'web', '--out-dir', dir, '--out-name', 'index', cargoWasm], { stdio: 'ignore' });
      const unopt = readFileSync(join(dir, 'index_bg.wasm'));
      out.beforeWasmOpt = { raw: unopt.length, gzip: gzipSync(unopt, { level: 9 }).length };
    } catch {
      /* wasm-bindgen missing: no before figure */
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// The run

const RINDLE_VARS = { IDLE_TIMEOUT_MS: '0', LINGER_MS: '2000' };

/** The two sides: how to start each one's stack and how to drive it. */
const FLOOR_CONFIG = join(ROOT, 'bench', 'floor', 'wrangler.toml');
// The same floor in Rust (bench/floor-rs: `BUILD_CRATE=bench/floor-rs scripts/build.sh`).
const FLOOR_RS_CONFIG = join(ROOT, 'bench', 'floor-rs', 'wrangler.toml');
const SIDES = {
  // The floor takes vars too (FLOOR_BODY: bench/floor/floor.mjs); before 2026-12-01 it dropped
  // them, so every `--var FLOOR_BODY=…` run measured the default body.
  floor: { stack: (vars) => ({ name: 'bench-floor', config: FLOOR_CONFIG, vars }), target: floorTarget },
  floorRs: {
    stack: (vars) => {
      if (!existsSync(join(ROOT, 'bench', 'floor-rs', 'build', 'worker', 'shim.mjs'))) {
        throw new Error('the Rust floor is not built: run BUILD_CRATE=bench/floor-rs scripts/build.sh');
      }
      return { name: 'bench-floor-rs', config: FLOOR_RS_CONFIG, vars };
    },
    target: (stack, base) => ({ ...floorTarget(stack, base), name: 'floor-rs' }),
  },
  rindleUi: { stack: (vars) => ({ name: 'bench-rindle-ui', vars: { ...RINDLE_VARS, ...vars } }), target: (stack, base) => rindleTarget(stack, base, { format: 'ui' }) },
  // The floor that also does what the lease does (see floor.mjs): for the memory figure.
  floorLease: {
    stack: () => ({ name: 'bench-floor-lease', config: FLOOR_CONFIG, vars: { FLOOR_LEASE: '1' } }),
    target: (stack, base) => ({ ...floorTarget(stack, base), name: 'floor+lease' }),
  },
  floorLeaseD1: {
    stack: () => ({ name: 'bench-floor-lease-d1', config: FLOOR_CONFIG, vars: { FLOOR_LEASE: '1', FLOOR_D1: '1' } }),
    target: (stack, base) => ({ ...floorTarget(stack, base), name: 'floor+lease+D1' }),
  },
  rindle: { stack: (vars) => ({ name: 'bench-rindle', vars: { ...RINDLE_VARS, ...vars } }), target: rindleTarget },
};

/**
 * Runs `fn(target)` on a fresh stack of `side` (with extra `vars`), stopped afterwards. Every
 * measurement gets its own runtime, and only one runtime runs at a time: one that fell behind
 * keeps writing its backlog for a long while, which must not be billed to the next.
 */
export async function onFreshStack(side, fn, { vars = {}, seen, bare = false } = {}) {
  const stack = await startStack({ ...SIDES[side].stack(vars), bare });
  try {
    const { base, direct, pid } = await workerBase(stack);
    if (seen) seen.direct = (seen.direct ?? true) && direct;
    stack.workerPid = pid; // the Worker's own workerd process (the other one is the dev proxy)
    await quietInspector(stack.inspectorPort);
    await quiet([stack]);
    return await fn(SIDES[side].target(stack, base));
  } finally {
    await stack.stop();
  }
}

/** The highest of `rates` one stream of `side` sustains with `readers` readers (p99 ≤ 100 ms, all delivered). */
async function maxRate(side, { readers, rates, seconds, warmupSeconds, vars, seen, bare }) {
  const steps = [];
  let best = null;
  for (const rate of rates) {
    const r = await onFreshStack(side, (t) => fanout(t, { readers, rate, seconds, warmupSeconds, warmupRate: rate }), { vars, seen, bare });
    const holds = r.complete && r.violations === 0 && r.p99 !== null && r.p99 <= 100 && r.achievedRate >= rate * 0.95;
    steps.push({ rate, holds, p50: r.p50, p99: r.p99, achievedRate: r.achievedRate, complete: r.complete, cpuMsPer1000Deliveries: r.cpuMsPer1000Deliveries });
    if (!holds) break;
    best = rate;
  }
  return { target: side, readers, best, steps };
}

/** The median of some numbers (the mean of the middle two for an even count). */
export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

/** One side's runs as one: every numeric figure the median of the runs', the rest the first run's. */
function medianRun(runs) {
  const out = { ...runs[0], runs: runs.length };
  for (const [key, value] of Object.entries(runs[0])) {
    if (typeof value !== 'number') continue;
    out[key] = round(median(runs.map((r) => r[key]).filter((x) => typeof x === 'number')), 2);
  }
  out.complete = runs.every((r) => r.complete);
  out.violations = runs.reduce((sum, r) => sum + r.violations, 0);
  out.p50Pooled = pooledPercentile(runs, 50) ?? undefined;
  out.p99Pooled = pooledPercentile(runs, 99) ?? undefined;
  return out;
}

/**
 * Runs the scenarios (`only`: a subset of latency, plain, ui, maxRate, d1, memory, variants; default
 * all); `smoke` shrinks each to seconds. `log` gets progress lines.
 */
export async function runBench({ smoke = false, only, pairs = 1, warmup = {}, bare = false, log = () => {} } = {}) {
  const want = (name) => !only || only.includes(name);
  const commit = (() => {
    try {
      return execFileSync('git', ['-C', ROOT, 'rev-parse', '--short', 'HEAD']).toString().trim();
    } catch {
      return null;
    }
  })();
  const report = { smoke, commit, machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, node: process.version, date: new Date().toISOString(), loadAverage: os.loadavg()[0] } };
  report.wasm = wasmSize();
  log(`wasm ${report.wasm.raw} bytes, ${report.wasm.gzip} gzipped`);
  const seen = {};
  const on = (side, fn, vars) => onFreshStack(side, fn, { vars, seen, bare });
  const both = async (fn) => ({ floor: await on('floor', fn), rindle: await on('rindle', fn) });
  // --pairs N: N pairs, floor first in one and rindle first in the next, so that a machine's
  // drift falls on both sides alike; each side's figures are medians over its N runs.
  const pairsOf = async (fn) => {
    if (pairs <= 1) return both(fn);
    const runs = { floor: [], rindle: [] };
    for (let i = 0; i < pairs; i++) {
      for (const side of i % 2 ? ['rindle', 'floor'] : ['floor', 'rindle']) runs[side].push(await on(side, fn));
    }
    const cpuRatios = runs.rindle.map((r, i) => round(r.cpuMsPer1000Deliveries / runs.floor[i].cpuMsPer1000Deliveries, 3));
    return { floor: medianRun(runs.floor), rindle: medianRun(runs.rindle), runs, cpuRatios };
  };
  const seconds = smoke ? 1 : 10;
  // The smoke run measures nothing worth warming up for.
  const warmupSeconds = smoke ? 0 : (warmup.seconds ?? WARMUP.seconds);
  // The latency and plain rows (the floor's comparison) warm up faster than they measure
  // (WARMUP; --warmup, --warmup-rate); the other fan-out rows lightly, at the measured rate.
  const warmupRate = warmup.rate ?? WARMUP.rate;
  const light = smoke ? 0 : LIGHT_WARMUP_SECONDS;
  report.warmup = { seconds: warmupSeconds, rate: warmupRate, otherRows: `${light} s at the measured rate` };

  // The same load through one streaming append (`latency`) and as one POST per delta (`plain`).
  for (const [scenario, plain] of [['latency', false], ['plain', true]]) {
    report[scenario] = [];
    // The smoke run keeps one row of each: it only has to show the scenario still runs.
    for (const readers of want(scenario) ? (smoke ? [10] : [1, 10, 100]) : []) {
      const pair = await pairsOf((t) => fanout(t, { readers, rate: 100, seconds, plain, warmupSeconds, warmupRate }));
      report[scenario].push(pair);
      log(`${scenario} ${readers} readers: floor ${pair.floor.achievedRate}/s p50 ${pair.floor.p50} p99 ${pair.floor.p99}, rindle ${pair.rindle.achievedRate}/s p50 ${pair.rindle.p50} p99 ${pair.rindle.p99}`);
    }
  }

  // Issue 9's figure: the same answer as a `ui` stream (NDJSON text-delta lines, read from /ui)
  // and as a `text` stream, through one streaming append.
  // The full run gives each measurement a fresh stack; the smoke run (which only shows the
  // scenario still runs) does the fan-out only.
  report.ui = [];
  const uiReaders = want('ui') ? (smoke ? [1] : [1, 10, 100]) : [];
  const uiChars = smoke ? 10_000 : 100_000;
  if (smoke && want('ui')) {
    // The fan-out only: the D1 count's harness is the `d1` scenario's, smoke-run below.
    const run = (t) => fanout(t, { readers: 1, rate: 100, seconds, warmupSeconds: light, warmupRate: 100 });
    report.ui.push({ text: await on('rindle', run), ui: await on('rindleUi', run) });
  }
  for (const readers of smoke ? [] : uiReaders) {
    const fn = (t) => fanout(t, { readers, rate: 100, seconds, warmupSeconds: light, warmupRate: 100 });
    const pair = { text: await on('rindle', fn), ui: await on('rindleUi', fn) };
    report.ui.push(pair);
    log(`ui ${readers} readers: text p99 ${pair.text.p99} CPU ${pair.text.cpuMsPer1000Deliveries}, ui p99 ${pair.ui.p99} CPU ${pair.ui.cpuMsPer1000Deliveries}`);
  }
  if (!smoke && want('ui')) {
    report.uiD1 = { text: await on('rindle', (t) => d1Traffic(t, { chars: uiChars })), ui: await on('rindleUi', (t) => d1Traffic(t, { chars: uiChars })) };
  }
  if (report.uiD1) log(`ui d1: text ${report.uiD1.text.bytesPerTextByte} bytes per text byte, ui ${report.uiD1.ui.bytesPerTextByte}`);

  const rates = smoke ? [50] : [10, 25, 50, 100, 150, 200, 300];
  const rateOptions = { readers: smoke ? 10 : 100, rates, seconds: smoke ? 1 : 6, warmupSeconds: light, seen, bare };
  if (want('maxRate')) {
    report.maxRate = { floor: await maxRate('floor', rateOptions), rindle: await maxRate('rindle', rateOptions) };
    log(`max rate: floor ${report.maxRate.floor.best}/s, rindle ${report.maxRate.rindle.best}/s`);
  }

  report.d1 = [];
  if (want('d1')) {
    report.d1 = await on('rindle', async (t) => {
      const out = [];
      for (const chars of smoke ? [10_000] : [10_000, 100_000, 1_000_000]) {
        out.push(await d1Traffic(t, { chars }));
        log(`d1 ${chars} chars: ${JSON.stringify(out.at(-1))}`);
      }
      return out;
    });
    report.flush = await on('rindle', (t) => flushRoundTrip(t, { flushes: smoke ? 20 : 300 }));
    log(`flush round trip: ${JSON.stringify(report.flush)}`);
  }

  if (want('memory')) {
    const m = (t) => memory(t, { streams: smoke ? 10 : 100 });
    report.memory = { floor: await on('floor', m), floorLease: await on('floorLease', m), floorLeaseD1: await on('floorLeaseD1', m), rindle: await on('rindle', m) };
    log(`memory: floor ${report.memory.floor.mbPer100Streams} MB/100, floor+lease ${report.memory.floorLease.mbPer100Streams} MB/100, rindle ${report.memory.rindle.mbPer100Streams} MB/100`);
  }

  // Before/after of the hot-path choices that can be switched off, one at a time.
  if (want('variants')) {
    const v = (report.variants = {});
    const perDelta = (t) => d1PerDelta(t, { deltas: smoke ? 50 : 500, rate: 100 });
    v.perDeltaD1 = { default: await on('rindle', perDelta) };
    if (!smoke) {
      v.perDeltaD1.checkpointEveryDelta = await on('rindle', perDelta, { CHECKPOINT_CHARS: '1' });
      for (const [name, vars] of [['noPacing', { READER_PACING_US: '0' }], ['noMerge', { MERGE_QUEUED_CHUNKS: '0' }]]) {
        v[name] = {
          latency100: await on('rindle', (t) => fanout(t, { readers: 100, rate: 100, seconds, warmupSeconds: light, warmupRate: 100 }), vars),
          maxRate: await maxRate('rindle', { ...rateOptions, vars }),
        };
        log(`${name}: 100 readers p99 ${v[name].latency100.p99}, max rate ${v[name].maxRate.best}/s`);
      }
    }
  }
  report.direct = seen.direct ?? false;
  report.bare = bare;
  return report;
}

/** The report as Markdown tables (absolute figures and ratios to the floor). */
export function formatReport(r) {
  const ratio = (a, b) => (a === null || b === null || !b ? 'n/a' : `${Number((a / b).toPrecision(2))}×`);
  const lines = [];
  lines.push(`machine: ${r.machine.cpus} × ${r.machine.model}, Node ${r.machine.node}, ${r.machine.date}, load average ${r.machine.loadAverage?.toFixed(1)} at the start, commit ${r.commit}${r.smoke ? ' (smoke run)' : ''}; load ${r.bare ? 'on stacks served bare (bench/bare-serve.mjs: no entry Worker, dev middleware or dev proxy)' : r.direct ? "on the Worker's own socket (past the dev proxy)" : 'through the dev proxy'}, inspector Network domain off${r.warmup ? `; warm-up ${r.warmup.seconds} s at ${r.warmup.rate}${typeof r.warmup.rate === 'number' ? '/s' : ''}${r.warmup.otherRows ? ` (the ui, max-rate and variants rows ${r.warmup.otherRows})` : ''}` : ''}`, '');
  for (const [scenario, title] of [['latency', 'one streaming append'], ['plain', 'one POST per delta']]) {
    if (!r[scenario]?.length) continue;
    lines.push(`${title}, 4-unit deltas at 100/s offered:`, '');
    lines.push('| readers | side | deltas/s | p50 ms | p99 ms | p99 ms, runs pooled | stalls | max ms | append answered p50 / p99 ms | deliveries | writes / 1k deliveries | CPU ms / 1k deliveries | CPU ms / 1k deltas | p99 ratio | p99 ratio, pooled | CPU/delivery ratio |');
    lines.push('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
    const paired = r[scenario].filter((row) => row.cpuRatios);
    for (const { floor, rindle } of r[scenario]) {
      for (const x of [floor, rindle]) {
        const isRindle = x === rindle;
        lines.push(
          `| ${x.readers} | ${x.target} | ${x.achievedRate} | ${x.p50} | ${x.p99} | ${x.p99Pooled ?? ''} | ${x.stalls} | ${x.max} | ${x.plain ? `${x.appendP50} / ${x.appendP99}` : ''} | ${x.deliveries}/${x.expectedDeliveries} | ${x.writesPer1000Deliveries} | ${x.cpuMsPer1000Deliveries} | ${x.cpuMsPer1000Deltas} | ${isRindle ? ratio(x.p99, floor.p99) : ''} | ${isRindle && x.p99Pooled !== undefined ? ratio(x.p99Pooled, floor.p99Pooled) : ''} | ${isRindle ? ratio(x.cpuMsPer1000Deliveries, floor.cpuMsPer1000Deliveries) : ''} |`,
        );
      }
    }
    lines.push('');
    if (paired.length) {
      lines.push(`Each row: medians of ${paired[0].floor.runs} runs per side, in alternating pairs; "runs pooled": the percentile of all those runs' samples together; stalls: measured deltas that reached every reader over ${STALL_MS} ms late (median of the runs). CPU ratio of each pair (rindle / floor): ${paired.map((row) => `${row.floor.readers} reader${row.floor.readers === 1 ? '' : 's'} ${row.cpuRatios.join(', ')}`).join('; ')}.`, '');
    }
  }
  if (r.ui?.length) {
    lines.push('`ui` vs `text`, the same answer through one streaming append at 100 deltas/s:', '');
    lines.push('| readers | format | p50 ms | p99 ms | deliveries | CPU ms / 1k deliveries | ui / text CPU | ui / text p99 |', '|---|---|---|---|---|---|---|---|');
    for (const { text, ui } of r.ui) {
      lines.push(`| ${text.readers} | text | ${text.p50} | ${text.p99} | ${text.deliveries}/${text.expectedDeliveries} | ${text.cpuMsPer1000Deliveries} | | |`);
      lines.push(`| ${ui.readers} | ui | ${ui.p50} | ${ui.p99} | ${ui.deliveries}/${ui.expectedDeliveries} | ${ui.cpuMsPer1000Deliveries} | ${ratio(ui.cpuMsPer1000Deliveries, text.cpuMsPer1000Deliveries)} | ${ratio(ui.p99, text.p99)} |`);
    }
    if (r.uiD1) lines.push('', `D1 bytes per byte of the answer: text ${r.uiD1.text.bytesPerTextByte}, ui ${r.uiD1.ui.bytesPerTextByte} (${r.uiD1.ui.bytesPerWireByte} per NDJSON byte)`);
    lines.push('');
  }
  if (r.maxRate) {
    lines.push('', `max rate with ${r.maxRate.rindle.readers} readers (p99 ≤ 100 ms): floor ${r.maxRate.floor.best ?? 'none'}/s, rindle ${r.maxRate.rindle.best ?? 'none'}/s`);
    for (const side of ['floor', 'rindle']) lines.push(`  ${side}: ${r.maxRate[side].steps.map((s) => `${s.rate}/s p99 ${s.p99}${s.holds ? '' : ' ✗'}`).join(', ')}`);
  }
  lines.push('', '| chars | text bytes | statements / 10k | rows / 10k | bytes / 10k | bytes per text byte |', '|---|---|---|---|---|---|');
  for (const d of r.d1) lines.push(`| ${d.chars} | ${d.textBytes} | ${d.statementsPer10k} | ${d.rowsPer10k} | ${d.bytesPer10k} | ${d.bytesPerTextByte} |`);
  if (r.flush) lines.push('', `flush round trip (one delta appended, then POST /flush, ${r.flush.flushes} times): p50 ${r.flush.p50} ms, p99 ${r.flush.p99} ms; D1 round trips per checkpoint ${r.flush.d1RoundsPerCheckpoint ?? 'n/a'}`);
  const m = r.memory;
  if (m) {
    lines.push('', 'memory per 100 live streams (MB; the second batch of 100, and in brackets the first on a fresh isolate):', '', '| side | workerd RSS (both processes) | the Worker\'s process | JS heap | wasm heap in use | wasm memory reserved |', '|---|---|---|---|---|---|');
    for (const x of [m.floor, m.floorLease, m.floorLeaseD1, m.rindle].filter(Boolean)) {
      lines.push(`| ${x.target} | ${x.mbPer100Streams} (${x.firstBatchMbPer100Streams}) | ${x.workerProcessMbPer100Streams}${x.workerProcessAnonMbPer100Streams == null ? '' : ` (anonymous ${x.workerProcessAnonMbPer100Streams}, mapped ${x.workerProcessMappedMbPer100Streams})`} | ${x.jsHeapMbPer100Streams} | ${x.wasmHeapInUseMbPer100Streams ?? ''} | ${x.wasmMemoryMbPer100Streams ?? ''} |`);
    }
    if (m.floorLease) lines.push('', `rindle / floor+lease: ${ratio(m.rindle.mbPer100Streams, m.floorLease.mbPer100Streams)} (RSS); workerd peak ${m.rindle.peakMb} MB`);
  }
  lines.push(`wasm: ${r.wasm.raw} bytes raw, ${r.wasm.gzip} gzipped${r.wasm.beforeWasmOpt ? ` (before wasm-opt: ${r.wasm.beforeWasmOpt.raw} raw, ${r.wasm.beforeWasmOpt.gzip} gzipped)` : ''}`);
  const v = r.variants;
  if (!v) return lines.join('\n');
  lines.push('', `D1 statements per delta at 100/s: ${v.perDeltaD1.default.statementsPerDelta}${v.perDeltaD1.checkpointEveryDelta ? ` (CHECKPOINT_CHARS=1: ${v.perDeltaD1.checkpointEveryDelta.statementsPerDelta})` : ''}`);
  for (const [name, label] of [['noPacing', 'reader pacing off'], ['noMerge', 'merging off']]) {
    const x = v[name];
    if (x) {
      lines.push(`${label}: 100 readers × 100/s p50 ${x.latency100.p50} p99 ${x.latency100.p99}, CPU ${x.latency100.cpuMsPer1000Deliveries} ms / 1k deliveries, ${x.latency100.writesPer1000Deliveries} writes / 1k deliveries; max rate ${x.maxRate.best ?? 'none'}/s`);
    }
  }
  return lines.join('\n');
}

/** Problems that make a run worthless (the smoke test asserts there are none). */
export function problems(r) {
  const out = [];
  for (const pair of [...r.latency, ...(r.plain ?? []), ...(r.ui ?? [])]) {
    // A row of --pairs is checked run by run.
    for (const x of pair.runs ? [...pair.runs.floor, ...pair.runs.rindle] : Object.values(pair)) {
      if (!x.complete) out.push(`${x.target} ${x.readers} readers: ${x.deliveries} of ${x.expectedDeliveries} deliveries`);
      if (x.violations) out.push(`${x.target} ${x.readers} readers: ${x.violations} splice violations`);
    }
  }
  for (const d of r.d1) if (!(d.statements > 0 && d.bytesBound >= d.textBytes)) out.push(`d1 ${d.chars}: ${JSON.stringify(d)}`);
  if (r.flush && !(r.flush.checkpoints >= r.flush.flushes && r.flush.p50 > 0)) out.push(`flush: ${JSON.stringify(r.flush)}`);
  return out;
}

async function main() {
  const args = process.argv.slice(2);
  const smoke = args.includes('--smoke');
  const json = args.includes('--json');
  const onlyAt = args.indexOf('--only');
  const only = onlyAt >= 0 ? args[onlyAt + 1]?.split(',') : undefined;
  const pairsAt = args.indexOf('--pairs');
  const pairs = pairsAt >= 0 ? Number(args[pairsAt + 1]) : 1;
  const { load } = loadFromArgs(args);
  const warmup = { seconds: load.warmupSeconds, rate: load.warmupRate };
  const bare = args.includes('--bare');
  const report = await runBench({ smoke, only, pairs, warmup, bare, log: (line) => process.stderr.write(`bench: ${line}\n`) });
  process.stdout.write(json ? `${JSON.stringify(report, null, 2)}\n` : `${formatReport(report)}\n`);
  const bad = problems(report);
  for (const p of bad) process.stderr.write(`bench: PROBLEM ${p}\n`);
  process.exit(bad.length ? 1 : 0);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((e) => {
    process.stderr.write(`bench: ${e.stack ?? e}\n`);
    process.exit(1);
  });
}
