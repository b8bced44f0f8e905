#!/usr/bin/env node
// Load bench for rindle-streams on loopback: N streams × R readers × D deltas/s for S seconds,
// against the real Worker under `wrangler dev` (started here with the e2e harness, or given
// with --url/--secret/--db for a stack that is already running).
//
//   node bench/load.mjs                       # the full size: 50 streams × 10 readers × 50/s × 60 s
//   node bench/load.mjs --streams 20 --seconds 20 --mode plain
//   node bench/load.mjs --json                # the report as JSON on stdout
//
// Every stream has ONE streaming append request (no content-length) that writes a delta
// every 1000/rate ms (--mode plain: one POST per delta instead). Every reader is checked
// frame by frame against the text its stream produced (contract S: no character lost or
// doubled, chunk text.length == seq - from, contiguous, durable never ahead of delivery, end
// with the full length); one reader per stream joins late, at a random offset within the
// durable text it just read from /text (a real splice). /stats is polled for retainedBytes.
//
// A separate "slow" stream (plain appends) has 1 healthy reader and, from a quarter of the run
// (at most 15 s in), 1 reader that stops reading (its socket is paused); from then on it
// carries big deltas (--slow-delta-bytes each). The paused reader must get `stale` and
// be dropped (log line reader_dropped) without slowing anyone else (latency windows before,
// during and after the pause are reported). ~9 MB of socket/proxy buffers sit between the
// Worker and a paused client under wrangler dev, hence the big deltas.
//
// Exit status 0 when there was no violation and no error, 1 otherwise.
import http from 'node:http';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { jsonOrUndefined, sseParser } from '../tests/e2e/harness.mjs';
import { rawRequest, rng, sleep } from '../tests/e2e/util.mjs';
import { workerBase } from './bench.mjs';

const PIECES = ['😀', '🎉', '🦀', '𝄞', '👍🏽', '🇯🇵', '👨‍👩‍👧', 'é', '漢字', 'ß', '\n', '"', '\\', 'data: x\n\n', 'the ', 'model ', 'streams ', 'a ', 'token ', 'to ', 'D1 '];
/** A model-like delta: 2-8 pieces, emoji-heavy, never a lone surrogate. */
function delta(r) {
  let s = '';
  for (let i = r.int(2, 8); i > 0; i--) s += r.pick(PIECES);
  return s;
}

/** Latency histogram: `res` ms buckets up to `maxMs`. */
class Histogram {
  constructor(res = 0.1, maxMs = 120_000) {
    this.res = res;
    this.buckets = new Uint32Array(Math.ceil(maxMs / res) + 1);
    this.n = 0;
    this.max = 0;
    this.sum = 0;
  }
  add(ms) {
    const b = Math.min(this.buckets.length - 1, Math.max(0, Math.round(ms / this.res)));
    this.buckets[b]++;
    this.n++;
    this.sum += ms;
    if (ms > this.max) this.max = ms;
  }
  merge(other) {
    for (let i = 0; i < this.buckets.length; i++) this.buckets[i] += other.buckets[i];
    this.n += other.n;
    this.sum += other.sum;
    this.max = Math.max(this.max, other.max);
    return this;
  }
  pct(p) {
    if (this.n === 0) return null;
    const want = Math.ceil((p / 100) * this.n);
    let seen = 0;
    for (let i = 0; i < this.buckets.length; i++) {
      seen += this.buckets[i];
      if (seen >= want) return Math.round(i * this.res * 10) / 10;
    }
    return this.max;
  }
  summary() {
    return this.n === 0
      ? { n: 0 }
      : { n: this.n, p50: this.pct(50), p90: this.pct(90), p99: this.pct(99), p999: this.pct(99.9), max: Math.round(this.max * 10) / 10, mean: Math.round((this.sum / this.n) * 10) / 10 };
  }
}

/** One request on its own connection; { status, raw, json } (status 0 and the error in `raw` when it failed). */
async function request(base, { method = 'GET', path, headers = {}, body, timeoutMs = 30_000 }) {
  const r = await rawRequest(base, { method, path, headers, body, timeoutMs });
  return { ...r, raw: r.raw ?? r.error };
}

// ---------------------------------------------------------------------------------------
// The run

/**
 * `stack` with its Worker's own socket as the base URL, past wrangler's dev proxy (production
 * has no such hop; under load the proxy saturates first). Throws when the socket is not found.
 */
export async function pastTheProxy(stack) {
  const { base, direct } = await workerBase(stack);
  if (!direct) throw new Error("the Worker's own socket was not found past the dev proxy");
  return Object.create(stack, { baseUrl: { value: base } });
}

/**
 * What a run at the full size should meet (BENCHMARKS.md); formatReport says whether it did.
 * Timing, so a benchmark's business: tests/e2e/load.test.mjs checks correctness only.
 */
export const LATENCY_TARGETS_MS = { p50: 1000, p99: 5000 };

/**
 * Runs the load against a stack ({ baseUrl, token(id), db, logs() }); returns the report.
 * Options: streams, readers, rate (deltas/s per stream), seconds, mode ('streaming'|'plain'),
 * deltas (each producer stops after this many instead of at the end of `seconds`: the load
 * then does not depend on how fast the machine keeps the pace), slow (bool), slowRate (the
 * slow stream's deltas/s, default `rate`), slowDeltaBytes, slowReaders, seed, log (function
 * for progress lines).
 */
export async function runLoad(stack, opts = {}) {
  const cfg = {
    streams: 50, readers: 10, rate: 50, seconds: 60, mode: 'streaming', slow: true, slowDeltaBytes: 64 * 1024,
    slowReaders: 1, statsEveryMs: 2000, ...opts,
  };
  cfg.seed ??= (Math.random() * 2 ** 32) >>> 0;
  const log = cfg.log ?? (() => {});
  const base = stack.baseUrl;
  const violations = [];
  const errors = [];
  const violation = (s) => {
    if (violations.length < 200) violations.push(s);
  };
  const error = (s) => {
    if (errors.length < 200) errors.push(s);
  };
  const t0 = performance.now();
  const latAll = new Histogram();
  /** Latencies of the healthy readers by the second their delta was sent (1 ms buckets). */
  const perSecond = [];
  const latSlowHealthy = new Histogram();
  const marks = { pausedAt: null, droppedAt: null };
  let runStart = Infinity; // set when the producers start
  /** Set when the runtime under test breaks down (e.g. workerd out of file descriptors). */
  let aborted = null;
  let deliveries = 0; // chunk frames received
  let unitsDelivered = 0;

  // ---- streams and their produced text (as deltas, with send times)
  const mkStream = (k, slow = false) => {
    const id = `load-${process.pid}-${Date.now().toString(36)}-${slow ? 'slow' : k}`;
    stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES (?, 'load', 'assistant')`, id);
    return { id, slow, token: stack.token(id), readToken: stack.token(id, 'read'), deltas: [], ends: [], sentAt: [], seq: 0, bytes: 0, readers: [], retainedMax: 0, overheadMax: 0, done: false };
  };
  const streams = Array.from({ length: cfg.streams }, (_, k) => mkStream(k));
  const slow = cfg.slow ? mkStream(0, true) : null;
  const all = slow ? [...streams, slow] : streams;
  for (const s of all) {
    const r = await request(base, { method: 'POST', path: `/streams/${s.id}/open`, headers: { authorization: `Bearer ${s.token}` } });
    if (r.status !== 200) throw new Error(`open ${s.id}: ${r.status} ${r.raw}`);
  }

  // ---- readers
  /**
   * A reader of stream `s` from offset `from`, checking every frame against the produced text.
   * `durable` is the durable text it read before joining (its splice base).
   */
  const attachReader = (s, label, { from = 0, durable = '', healthy = true, paused = false, late = false } = {}) => {
    const rd = { label, s, from, durable, healthy, paused, measure: healthy && !late, cursor: null, k: 0, off: 0, end: null, stale: null, open: null, done: false, frames: 0 };
    const onEvent = ({ id, data }) => {
      const now = performance.now();
      let f;
      try {
        f = JSON.parse(data);
      } catch {
        return violation(`${label}: non-JSON frame ${data.slice(0, 80)}`);
      }
      rd.frames++;
      if (rd.end || rd.stale) return violation(`${label}: frame after its terminal frame: ${data.slice(0, 80)}`);
      switch (f.type) {
        case 'open': {
          if (rd.open) return violation(`${label}: second open`);
          rd.open = f;
          if (id !== String(f.from)) violation(`${label}: open id ${id} != from ${f.from}`);
          // Splice base: the durable text read before joining must cover [0, from) and be a
          // prefix of the produced text (contract P), checked against the deltas.
          if (f.from > rd.durable.length) violation(`${label}: open.from ${f.from} beyond its durable text (${rd.durable.length})`);
          if (!matchesProduced(s, 0, rd.durable.slice(0, f.from))) violation(`${label}: durable text is not a prefix of the produced text`);
          rd.cursor = f.from;
          seekTo(rd, f.from);
          break;
        }
        case 'chunk': {
          if (rd.cursor === null) return violation(`${label}: chunk before open`);
          if (id !== String(f.seq)) violation(`${label}: chunk id ${id} != seq ${f.seq}`);
          if (f.text.length !== f.seq - f.from) violation(`${label}: chunk [${f.from},${f.seq}) carries ${f.text.length} UTF-16 units`);
          if (f.from !== rd.cursor) return violation(`${label}: chunk from ${f.from} but delivered up to ${rd.cursor} (${f.from > rd.cursor ? 'lost' : 'duplicated'} characters)`);
          consume(rd, f.text, now);
          rd.cursor = f.seq;
          deliveries++;
          unitsDelivered += f.text.length;
          break;
        }
        case 'durable':
          if (f.seq > rd.cursor) violation(`${label}: durable ${f.seq} ahead of delivery ${rd.cursor}`);
          break;
        case 'end':
          rd.end = f;
          break;
        case 'stale':
          rd.stale = f;
          if (rd.healthy) violation(`${label}: a healthy reader got stale ${data}`);
          break;
        default:
          violation(`${label}: unexpected frame ${data.slice(0, 80)}`);
      }
    };
    const parser = sseParser((record) => record.data !== undefined && onEvent(record), { json: false });
    const parse = (text) => parser.push(text);
    const path = `/streams/${s.id}/events?from=${from}&token=${encodeURIComponent(s.readToken)}`;
    const { hostname, port } = new URL(base);
    rd.closed = new Promise((resolve) => {
      if (paused) {
        // A raw socket, so nothing reads past what the kernel holds once it is paused.
        const sock = net.connect(port, hostname, () => sock.write(`GET ${path} HTTP/1.1\r\nHost: ${hostname}\r\nAccept: text/event-stream\r\n\r\n`));
        rd.sock = sock;
        let head = '';
        let inBody = false;
        let chunked = '';
        sock.setEncoding('latin1'); // bytes; decoded below after de-chunking
        const dec = new TextDecoder();
        const bodyBytes = (latin) => parse(dec.decode(Buffer.from(latin, 'latin1'), { stream: true }));
        sock.on('data', (d) => {
          if (!rd.opened) {
            rd.opened = true;
            sock.pause(); // and never read again until told to
          }
          if (!inBody) {
            head += d;
            const i = head.indexOf('\r\n\r\n');
            if (i < 0) return;
            inBody = true;
            chunked = head.slice(i + 4);
          } else chunked += d;
          // De-chunk (Transfer-Encoding: chunked).
          for (;;) {
            const j = chunked.indexOf('\r\n');
            if (j < 0) break;
            const size = parseInt(chunked.slice(0, j), 16);
            if (Number.isNaN(size) || chunked.length < j + 2 + size + 2) break;
            bodyBytes(chunked.slice(j + 2, j + 2 + size));
            chunked = chunked.slice(j + 2 + size + 2);
            if (size === 0) sock.end();
          }
        });
        sock.on('close', () => resolve());
        sock.on('error', (e) => {
          if (!rd.end && !rd.stale) error(`${label}: ${e.message}`);
        });
        return;
      }
      const req = http.get({ host: hostname, port, path, agent: false, headers: { accept: 'text/event-stream' } }, (res) => {
        if (res.statusCode !== 200) error(`${label}: events ${res.statusCode}`);
        res.setEncoding('utf8');
        res.on('data', parse);
        res.on('end', resolve);
        res.on('close', resolve);
        res.on('error', (e) => {
          error(`${label}: ${e.message}`);
          resolve();
        });
      });
      rd.req = req;
      req.on('error', (e) => {
        error(`${label}: ${e.message}`);
        resolve();
      });
    });
    s.readers.push(rd);
    return rd;
  };

  /** Positions a reader's delta pointer at UTF-16 offset `at`. */
  function seekTo(rd, at) {
    const { s } = rd;
    let k = 0;
    while (k < s.ends.length && s.ends[k] <= at) k++;
    rd.k = k;
    rd.off = k < s.ends.length ? at - (s.ends[k] - s.deltas[k].length) : 0;
  }

  /** True when `text` equals the produced text at [from, from + text.length). */
  function matchesProduced(s, from, text) {
    let k = 0;
    while (k < s.ends.length && s.ends[k] <= from) k++;
    let off = k < s.ends.length ? from - (s.ends[k] - s.deltas[k].length) : 0;
    let i = 0;
    while (i < text.length) {
      if (k >= s.deltas.length) return false;
      const part = s.deltas[k].slice(off);
      const take = Math.min(part.length, text.length - i);
      if (text.slice(i, i + take) !== part.slice(0, take)) return false;
      i += take;
      off += take;
      if (off >= s.deltas[k].length) {
        k++;
        off = 0;
      }
    }
    return true;
  }

  /** Checks a chunk's text against the produced deltas and records per-delta latency. */
  function consume(rd, text, now) {
    const { s } = rd;
    let i = 0;
    while (i < text.length) {
      if (rd.k >= s.deltas.length) return violation(`${rd.label}: delivered text that was never produced (at ${rd.cursor + i})`);
      const d = s.deltas[rd.k];
      const part = d.slice(rd.off);
      const take = Math.min(part.length, text.length - i);
      if (text.slice(i, i + take) !== part.slice(0, take)) {
        return violation(`${rd.label}: delivered text differs from the produced text at UTF-16 offset ${s.ends[rd.k] - d.length + rd.off}`);
      }
      i += take;
      rd.off += take;
      if (rd.off >= d.length) {
        // A whole delta arrived: its latency, from the moment it was written.
        const ms = now - s.sentAt[rd.k];
        if (rd.measure) {
          if (s.slow) latSlowHealthy.add(ms);
          else {
            latAll.add(ms);
            const sec = Math.max(0, Math.floor((s.sentAt[rd.k] - runStart) / 1000));
            (perSecond[sec] ??= new Histogram(1, 30_000)).add(ms);
          }
        }
        rd.k++;
        rd.off = 0;
      }
    }
  }

  const lateReaderIndex = cfg.readers - 1; // joins at a third of the run, from its durable text
  for (const s of streams) for (let i = 0; i < cfg.readers; i++) if (i !== lateReaderIndex || cfg.readers === 1) attachReader(s, `${s.id}#${i}`);
  if (slow) for (let i = 0; i < cfg.slowReaders; i++) attachReader(slow, `${slow.id}#${i}`);
  // Wait until every reader has its open frame.
  const openBy = performance.now() + 30_000;
  while (all.some((s) => s.readers.some((rd) => !rd.open)) && performance.now() < openBy) await sleep(20);
  const unopened = all.flatMap((s) => s.readers.filter((rd) => !rd.open).map((rd) => rd.label));
  if (unopened.length) throw new Error(`${unopened.length} readers got no open frame within 30 s (e.g. ${unopened[0]})`);
  log(`${streams.length} streams open, ${streams.reduce((a, s) => a + s.readers.length, 0)} readers attached (+${slow ? slow.readers.length : 0} on the slow stream)`);

  // ---- producers
  const r = rng(cfg.seed);
  const slowPool = slow ? Array.from({ length: 16 }, () => { let x = ''; while (Buffer.byteLength(x) < cfg.slowDeltaBytes) x += delta(r); return x; }) : [];
  const produce = (s, text) => {
    s.deltas.push(text);
    s.seq += text.length;
    s.ends.push(s.seq);
    s.sentAt.push(performance.now());
    s.bytes += Buffer.byteLength(text);
  };
  const startProducer = (s, gen, until, mode = cfg.mode, tickMs = 1000 / cfg.rate) => {
    const { hostname, port } = new URL(base);
    if (mode === 'plain') {
      s.finished = (async () => {
        let next = performance.now();
        while (!until()) {
          const text = gen();
          produce(s, text);
          const a = await request(base, { method: 'POST', path: `/streams/${s.id}/append`, headers: { authorization: `Bearer ${s.token}`, 'content-type': 'text/plain; charset=utf-8' }, body: text });
          if (a.status !== 200) error(`${s.id}: append ${a.status} ${a.raw}`);
          next += tickMs;
          await sleep(Math.max(0, next - performance.now()));
        }
        return { status: 200, json: { seq: s.seq } };
      })();
      return;
    }
    const req = http.request({
      host: hostname,
      port,
      method: 'POST',
      path: `/streams/${s.id}/append`,
      agent: false,
      headers: { authorization: `Bearer ${s.token}`, 'content-type': 'text/plain; charset=utf-8', 'transfer-encoding': 'chunked' },
    });
    req.on('socket', (sock) => sock.setNoDelay(true));
    s.finished = new Promise((resolve) => {
      req.on('response', (res) => {
        let raw = '';
        res.on('data', (c) => (raw += c));
        res.on('end', () => {
          const json = jsonOrUndefined(raw);
          if (!s.done) error(`${s.id}: the streaming append answered before its body ended: ${res.statusCode} ${raw}`);
          resolve({ status: res.statusCode, raw, json });
        });
      });
      req.on('error', (e) => {
        error(`${s.id}: streaming append: ${e.message}`);
        resolve({ status: 0, raw: e.message });
      });
    });
    req.flushHeaders();
    let next = performance.now();
    const tick = () => {
      if (until()) {
        s.done = true;
        req.end();
        return;
      }
      const text = gen();
      produce(s, text);
      req.write(text);
      next += tickMs;
      const wait = next - performance.now();
      // Under load a timer fires late; never burst to catch up (the send time is recorded).
      if (wait < -tickMs) next = performance.now() + tickMs;
      setTimeout(tick, Math.max(0, next - performance.now()));
    };
    tick();
  };

  runStart = performance.now();
  const runEnd = runStart + cfg.seconds * 1000;
  // Watch the runtime's log: under wrangler dev, heavy SSE fan-out with streaming appends can
  // exhaust workerd's file descriptors, after which it logs errors in a tight loop (~100 MB/s).
  const watchdog = setInterval(() => {
    const tail = stack.logs().slice(-65_536);
    if (!aborted && /Too many open files/.test(tail)) {
      aborted = `workerd ran out of file descriptors ("Too many open files") ${Math.round((performance.now() - runStart) / 100) / 10} s into the run`;
      error(`aborted: ${aborted}`);
      log(`ABORT: ${aborted}`);
      cfg.onAbort?.(aborted); // e.g. kill the stack before its log fills the disk
    }
  }, 500);
  const producerDone = (s) => (cfg.deltas ? s.deltas.length >= cfg.deltas : performance.now() >= runEnd);
  for (const [k, s] of streams.entries()) {
    const sr = rng(cfg.seed + 1 + k);
    startProducer(s, () => delta(sr), () => aborted !== null || producerDone(s));
  }
  let slowStop = null;
  if (slow) {
    // Ordinary deltas until the reader pauses, then big ones (plain appends: a streaming
    // append is capped at MAX_APPEND_BYTES in total, 1 MiB, and the paused reader needs
    // ~8 MB to be dropped: the socket buffers in front of it, ~4 MB, then its queue of
    // MAX_QUEUED_FRAMES frames; ~9 MB through the dev proxy). The big deltas go on until the
    // drop is seen (or its deadline), not only until the run's end: on a slow machine they
    // came at ~0.1 MB/s, and a run's worth did not fill the buffers.
    let n = 0;
    const slowRng = rng(cfg.seed + 999_999);
    startProducer(slow, () => (marks.pausedAt !== null ? slowPool[n++ % slowPool.length] : delta(slowRng)), () => aborted !== null || (slowStop !== null && performance.now() >= slowStop), 'plain', 1000 / (cfg.slowRate ?? cfg.rate));
  }

  // ---- stats poller
  let polling = true;
  let statsPolls = 0;
  const poller = (async () => {
    while (polling) {
      await Promise.all(all.map(async (s) => {
        const bytesNow = s.bytes;
        const st = await request(base, { path: `/streams/${s.id}/stats`, headers: { authorization: `Bearer ${s.token}` } });
        if (st.status !== 200 || !st.json) return error(`${s.id}: stats ${st.status} ${st.raw}`);
        s.retainedMax = Math.max(s.retainedMax, st.json.retainedBytes);
        // The live buffer holds the text (tables mode keeps it for compaction); anything above
        // the text produced by the time the answer came is queue overhead.
        s.overheadMax = Math.max(s.overheadMax, st.json.retainedBytes - Math.max(bytesNow, s.bytes));
      }));
      statsPolls++;
      await sleep(cfg.statsEveryMs);
    }
  })();

  // ---- late joiners: at a third of the run, one reader per stream joins from its durable text
  const lateAt = runStart + (cfg.seconds * 1000) / 3;
  const lateJoin = (async () => {
    if (cfg.readers < 2) return;
    await sleep(Math.max(0, lateAt - performance.now()));
    await Promise.all(streams.map(async (s) => {
      const t = await request(base, { path: `/streams/${s.id}/text?token=${encodeURIComponent(s.readToken)}` });
      if (t.status !== 200) return error(`${s.id}: /text ${t.status} ${t.raw}`);
      if (!matchesProduced(s, 0, t.json.text)) violation(`${s.id}: /text is not a prefix of the produced text (P)`);
      const from = Math.floor(r() * (t.json.seq + 1));
      attachReader(s, `${s.id}#late`, { from, durable: t.json.text, late: true });
    }));
  })();

  // ---- the paused reader
  let paused = null;
  let slowReport = null;
  const slowPart = (async () => {
    if (!slow) return;
    const pauseAt = runStart + Math.min(15_000, (cfg.seconds * 1000) / 4);
    await sleep(Math.max(0, pauseAt - performance.now()));
    marks.pausedAt = performance.now();
    paused = attachReader(slow, `${slow.id}#paused`, { healthy: false, paused: true });
    const bytesAtPause = slow.bytes;
    let bytesAtDrop = null;
    const dropBy = marks.pausedAt + 40_000;
    let dropLine = null;
    while (performance.now() < dropBy) {
      const fresh = stack.logs().slice(-262_144);
      dropLine = fresh.split('\n').find((l) => l.includes('"event":"reader_dropped"') && l.includes(slow.id)) ?? null;
      if (dropLine) break;
      await sleep(50);
    }
    if (!dropLine) {
      violation(`${slow.id}: the paused reader was not dropped within 40 s`);
      slowStop = performance.now();
    } else {
      marks.droppedAt = performance.now();
      bytesAtDrop = slow.bytes;
      slowStop = Math.min(performance.now() + 3000, runStart + cfg.seconds * 1000); // a little more after the drop
    }
    const st = await request(base, { path: `/streams/${slow.id}/stats`, headers: { authorization: `Bearer ${slow.token}` } });
    // Read what the paused reader had buffered: it must end with `stale`.
    paused.sock?.resume();
    let t15;
    await Promise.race([paused.closed, new Promise((res) => (t15 = setTimeout(res, 15_000)))]);
    clearTimeout(t15);
    if (!paused.stale) violation(`${slow.id}: the paused reader's last frame is not stale (got ${paused.frames} frames, end ${JSON.stringify(paused.end)})`);
    slowReport = {
      droppedAfterMs: marks.droppedAt ? Math.round(marks.droppedAt - marks.pausedAt) : null,
      mbSentWhilePaused: bytesAtDrop === null ? null : Math.round(((bytesAtDrop - bytesAtPause) / 1e6) * 10) / 10,
      readersAfterDrop: st.json?.readers,
      staleFrame: paused.stale,
      pausedReaderFrames: paused.frames,
      logLine: dropLine,
    };
    paused.sock?.destroy();
  })();

  // ---- finish: end the bodies, close every stream, check every reader
  // Bounded: a broken runtime may never answer the appends.
  const bounded = (p, ms) => {
    let timer;
    const timeout = new Promise((res) => {
      timer = setTimeout(() => res({ status: 0, raw: `no answer within ${ms} ms` }), ms);
    });
    return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
  };
  let producersDone = false;
  await Promise.race([
    Promise.all(all.map((s) => s.finished)).finally(() => (producersDone = true)),
    (async () => {
      while (!aborted && !producersDone) await sleep(200);
      if (aborted) await sleep(5000);
    })(),
  ]);
  producersDone = true;
  for (const s of all) s.finished = bounded(s.finished, 1000);
  const produceEnd = performance.now();
  log(`producers done: ${streams.reduce((a, s) => a + s.deltas.length, 0)} deltas`);
  await bounded(slowPart, aborted ? 1000 : 120_000);
  await bounded(lateJoin, aborted ? 1000 : 60_000);
  log('closing');
  const closes = aborted ? [] : await Promise.all(all.map(async (s) => {
    const ap = await s.finished;
    if (ap.status !== 200) error(`${s.id}: append answered ${ap.status} ${ap.raw}`);
    else if (ap.json?.seq !== s.seq) violation(`${s.id}: append says seq ${ap.json?.seq}, produced ${s.seq}`);
    const c = await request(base, { method: 'POST', path: `/streams/${s.id}/close`, headers: { authorization: `Bearer ${s.token}` } });
    if (c.status !== 200) error(`${s.id}: close ${c.status} ${c.raw}`);
    else if (c.json.seq !== s.seq || c.json.durableSeq !== s.seq || c.json.status !== 'complete') violation(`${s.id}: close ${c.raw}, produced ${s.seq}`);
    return c;
  }));
  polling = false;
  await poller;
  log('closed; waiting for every reader to end');
  const readersBy = performance.now() + (aborted ? 2000 : 30_000);
  const everyone = all.flatMap((s) => s.readers.filter((rd) => rd !== paused));
  while (everyone.some((rd) => !rd.end && !rd.stale) && performance.now() < readersBy) await sleep(50);
  for (const rd of everyone) {
    if (!rd.end) violation(`${rd.label}: no end frame (delivered ${rd.cursor} of ${rd.s.seq})`);
    else {
      if (rd.end.seq !== rd.s.seq || rd.end.status !== 'complete') violation(`${rd.label}: end ${JSON.stringify(rd.end)}, produced ${rd.s.seq}`);
      if (rd.cursor !== rd.s.seq) violation(`${rd.label}: delivered ${rd.cursor} of ${rd.s.seq} units (lost characters)`);
    }
    rd.req?.destroy();
  }
  // The durable text after close is exactly the produced text.
  for (const s of aborted ? [] : all) {
    const t = await request(base, { path: `/streams/${s.id}/text?token=${encodeURIComponent(s.readToken)}` });
    if (t.status !== 200) error(`${s.id}: /text after close ${t.status}`);
    else if (t.json.seq !== s.seq || !matchesProduced(s, 0, t.json.text) || t.json.status !== 'complete') violation(`${s.id}: /text after close has ${t.json.seq} units (${t.json.status}), produced ${s.seq}`);
  }

  clearInterval(watchdog);
  const seconds = (produceEnd - runStart) / 1000;
  const windowOf = (fromMs, toMs) => {
    const h = new Histogram(1, 30_000);
    for (let sec = Math.max(0, Math.floor(fromMs / 1000)); sec < Math.ceil(toMs / 1000); sec++) if (perSecond[sec]) h.merge(perSecond[sec]);
    return h.summary();
  };
  const rel = (t) => (t === null ? null : t - runStart);
  const latencyWindowsMs = marks.pausedAt === null
    ? null
    : {
        pausedAtS: Math.round(rel(marks.pausedAt) / 100) / 10,
        droppedAtS: marks.droppedAt === null ? null : Math.round(rel(marks.droppedAt) / 100) / 10,
        baseline: windowOf(rel(marks.pausedAt) - 10_000, rel(marks.pausedAt)),
        whilePaused: windowOf(rel(marks.pausedAt), rel(marks.droppedAt ?? produceEnd)),
        afterDrop: marks.droppedAt === null ? { n: 0 } : windowOf(rel(marks.droppedAt) + 1000, rel(marks.droppedAt) + 11_000),
      };
  const deltasSent = streams.reduce((a, s) => a + s.deltas.length, 0);
  const healthyReaders = streams.reduce((a, s) => a + s.readers.length, 0);
  return {
    config: { streams: cfg.streams, readers: cfg.readers, rate: cfg.rate, seconds: cfg.seconds, deltas: cfg.deltas ?? null, mode: cfg.mode, slow: cfg.slow, slowRate: cfg.slowRate ?? cfg.rate, slowDeltaBytes: cfg.slowDeltaBytes, seed: cfg.seed },
    wallSeconds: Math.round(((performance.now() - t0) / 1000) * 10) / 10,
    aborted,
    produced: {
      deltas: deltasSent,
      deltasPerSec: Math.round(deltasSent / seconds),
      targetDeltasPerSec: cfg.streams * cfg.rate,
      units: streams.reduce((a, s) => a + s.seq, 0),
      bytes: streams.reduce((a, s) => a + s.bytes, 0),
    },
    delivered: {
      readers: healthyReaders,
      chunkFrames: deliveries,
      framesPerSec: Math.round(deliveries / seconds),
      units: unitsDelivered,
      deltaReceipts: latAll.n,
      expectedDeltaReceipts: streams.reduce((a, s) => a + s.deltas.length * s.readers.filter((rd) => rd.measure).length, 0),
    },
    latencyMs: latAll.summary(),
    latencyTargetsMet: latAll.n ? { p50: latAll.pct(50) < LATENCY_TARGETS_MS.p50, p99: latAll.pct(99) < LATENCY_TARGETS_MS.p99 } : null,
    latencyWindowsMs,
    slowStream: slow ? { ...slowReport, healthyReaderLatencyMs: latSlowHealthy.summary(), units: slow.seq, mb: Math.round((slow.bytes / 1e6) * 10) / 10 } : null,
    memory: {
      statsPolls,
      retainedBytesMax: Math.max(...streams.map((s) => s.retainedMax)),
      producedBytesMaxPerStream: Math.max(...streams.map((s) => s.bytes)),
      // retainedBytes minus the bytes produced by the time /stats answered: what the object
      // holds beyond the text itself (reader queues); bounded if memory is.
      queueOverheadBytesMax: Math.max(...streams.map((s) => s.overheadMax)),
      slowStreamRetainedBytesMax: slow?.retainedMax ?? null,
      slowStreamOverheadBytesMax: slow?.overheadMax ?? null,
    },
    closes: { ok: closes.filter((c) => c.status === 200).length, of: closes.length },
    violations,
    errors,
  };
}

// ---------------------------------------------------------------------------------------
// CLI

function parseArgs(argv) {
  const o = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const m = /^--([a-z-]+)(?:=(.*))?$/.exec(a);
    if (!m) throw new Error(`unknown argument ${a}`);
    const key = m[1].replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    if (['json', 'noSlow', 'help', 'direct'].includes(key)) o[key] = true;
    else o[key] = m[2] ?? argv[++i];
  }
  return o;
}

const HELP = `node bench/load.mjs [flags]
  --streams N            streams (default 50)
  --readers N            readers per stream (default 10)
  --rate N               deltas per second per stream (default 50)
  --seconds N            run time (default 60)
  --deltas N             each producer stops after N deltas instead (the run lasts as long as that takes)
  --mode streaming|plain one streaming append per stream (default) or one POST per delta
  --max-queued-frames N  MAX_QUEUED_FRAMES of the stack started here (default 64)
  --slow-delta-bytes N   delta size on the slow stream with the paused reader (default 65536)
  --no-slow              no slow stream / paused reader
  --seed N               text seed
  --json                 print the report as JSON
  --direct               send the load to the Worker's own socket, past wrangler's dev proxy
                         (which runs out of file descriptors at full size; see BENCHMARKS.md)
  --url URL --secret S --db FILE   use a running stack instead of starting one (logs: none,
                         so the paused reader's drop cannot be seen: use --no-slow)`;

async function main() {
  const a = parseArgs(process.argv.slice(2));
  if (a.help) return console.log(HELP);
  const harness = await import('../tests/e2e/harness.mjs');
  let stack;
  if (a.url) {
    if (!a.db) throw new Error('--url needs --db (the D1 sqlite file, to insert message rows)');
    const { openSqlite } = await import('../tests/e2e/sqlite.mjs');
    const db = openSqlite(a.db);
    stack = {
      baseUrl: a.url,
      db: { run: (sql, ...p) => db.prepare(sql).run(...p) },
      token: (id, scope) => harness.mintToken({ stream: id, scope }, a.secret ?? harness.TEST_SECRET),
      logs: () => '',
      stop: async () => db.close(),
    };
  } else {
    stack = await harness.startStack({ name: 'bench-load', vars: { MAX_QUEUED_FRAMES: String(a.maxQueuedFrames ?? 64), MAX_STREAM_BYTES: String(64 << 20) } });
  }
  const target = a.direct && !a.url ? await pastTheProxy(stack) : stack;
  const onAbort = () => stack.kill?.(); // stop workerd's error loop before its log fills the disk
  const say = (s) => process.stderr.write(`[load] ${s}\n`);
  let report;
  try {
    report = await runLoad(target, {
      streams: Number(a.streams ?? 50),
      readers: Number(a.readers ?? 10),
      rate: Number(a.rate ?? 50),
      seconds: Number(a.seconds ?? 60),
      deltas: a.deltas !== undefined ? Number(a.deltas) : undefined,
      mode: a.mode ?? 'streaming',
      slow: !a.noSlow,
      slowDeltaBytes: Number(a.slowDeltaBytes ?? 64 * 1024),
      seed: a.seed !== undefined ? Number(a.seed) : undefined,
      log: say,
      onAbort,
    });
  } finally {
    await stack.stop();
  }
  if (a.json) console.log(JSON.stringify(report, null, 2));
  else console.log(formatReport(report));
  process.exit(report.violations.length || report.errors.length ? 1 : 0);
}

export function formatReport(r) {
  const l = r.latencyMs;
  const w = r.latencyWindowsMs;
  const fmtLat = (x) => (x.n ? `p50 ${x.p50} ms, p90 ${x.p90} ms, p99 ${x.p99} ms, max ${x.max} ms (n=${x.n})` : 'n/a');
  return [
    ...(r.aborted ? [`ABORTED: ${r.aborted}`] : []),
    `load: ${r.config.streams} streams × ${r.config.readers} readers × ${r.config.rate} deltas/s × ${r.config.deltas ? `${r.config.deltas} deltas each` : `${r.config.seconds} s`}, ${r.config.mode} appends (seed ${r.config.seed}); wall ${r.wallSeconds} s`,
    `produced: ${r.produced.deltas} deltas (${r.produced.deltasPerSec}/s of ${r.produced.targetDeltasPerSec}/s target), ${r.produced.units} UTF-16 units, ${(r.produced.bytes / 1e6).toFixed(2)} MB`,
    `delivered: ${r.delivered.chunkFrames} chunk frames (${r.delivered.framesPerSec}/s) to ${r.delivered.readers} readers; delta receipts ${r.delivered.deltaReceipts} (from-0 readers expected ${r.delivered.expectedDeltaReceipts})`,
    `latency send→receipt: ${fmtLat(l)}`,
    ...(r.latencyTargetsMet
      ? [`  targets p50 < ${LATENCY_TARGETS_MS.p50} ms: ${r.latencyTargetsMet.p50 ? 'met' : 'MISSED'}, p99 < ${LATENCY_TARGETS_MS.p99} ms: ${r.latencyTargetsMet.p99 ? 'met' : 'MISSED'}`]
      : []),
    ...(w
      ? [
          `  10 s before the reader paused (at ${w.pausedAtS} s): ${fmtLat(w.baseline)}`,
          `  while it was paused (dropped at ${w.droppedAtS} s):    ${fmtLat(w.whilePaused)}`,
          `  10 s after the drop:                    ${fmtLat(w.afterDrop)}`,
        ]
      : []),
    r.slowStream
      ? `slow stream: ${r.slowStream.mb} MB; paused reader dropped after ${r.slowStream.droppedAfterMs} ms (${r.slowStream.mbSentWhilePaused} MB sent meanwhile) with ${JSON.stringify(r.slowStream.staleFrame)}; its healthy readers: ${fmtLat(r.slowStream.healthyReaderLatencyMs)}`
      : 'slow stream: off',
    `memory: retainedBytes max ${r.memory.retainedBytesMax} (produced max ${r.memory.producedBytesMaxPerStream} bytes/stream), queue overhead max ${r.memory.queueOverheadBytesMax} bytes; slow stream retained max ${r.memory.slowStreamRetainedBytesMax}, overhead max ${r.memory.slowStreamOverheadBytesMax}`,
    `closes ok ${r.closes.ok}/${r.closes.of}; violations ${r.violations.length}; errors ${r.errors.length}`,
    ...r.violations.slice(0, 20).map((v) => `  VIOLATION ${v}`),
    ...r.errors.slice(0, 20).map((e) => `  ERROR ${e}`),
  ].join('\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
