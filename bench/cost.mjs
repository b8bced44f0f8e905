#!/usr/bin/env node
// The cost of an answer, in Cloudflare's billing units, COUNTED in one run (not timed): each
// answer streams through the real Worker (wrangler dev: workerd, local D1) by the recommended
// producer path (public/producer.js: open, ONE streaming append, close) at a model's pace, to
// readers using the shipped clients (public/client.js over the `eventsource` package for a
// `text` stream; public/chat-transport.js's readUIStream for a `ui` stream), and each reader
// closes on `end`. The counts come from where they happen:
//   - the object's meter (/stats `meter`, src/edge/meter.rs): requests by route, alarm
//     invocations, the object's own storage calls, and the wall-clock time it was awake (a
//     request, a reader's body, a pending timer or store I/O held it: what Cloudflare bills as
//     duration, "active, or idle but unable to hibernate");
//   - the D1 executor (/stats `d1`): rows read and written as D1 reports them (`meta`);
//   - the D1 file itself (node:sqlite, no request): the chunk rows' peak while streaming and
//     what stays; the object's own SQLite file: what it keeps after the answer.
// Beside rindle's counted column stand two designs users would otherwise pick, as formulas
// from their documented or source behaviour (`naiveD1`, `naiveObjectStorage`,
// `resumableStreamRedis` below), and the monthly price of a stated workload.
//
//   node bench/cost.mjs                 # 1,000 and 10,000 tokens × 1 and 10 readers × text and ui, at 50 tokens/s (≈5 min)
//   node bench/cost.mjs --tps 100       # another model speed
//   node bench/cost.mjs --tokens 200 --readers 1,3 --formats text   # a subset
//   node bench/cost.mjs --json          # the report as JSON on stdout
//   node bench/cost.mjs --report FILE   # print a saved report's tables again (no run)
// The report is written to bench/results/<date>-<commit>-cost.json (not with --no-save).
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { EventSource } from 'eventsource';
import { ROOT, startStack } from '../tests/e2e/harness.mjs';
import { newStream, rng, sleep, until } from '../tests/e2e/util.mjs';
import { openSqlite, pragmaValue } from '../tests/e2e/sqlite.mjs';
import { openStream } from '../public/producer.js';
import { followStream } from '../public/client.js';
import { readUIStream } from '../public/chat-transport.js';

/** Cloudflare bills a Durable Object's duration at 128 MB, whatever it uses (pricing page, footnote 5). */
export const OBJECT_GB = 0.128;

const READ = '2026-12-05';
/**
 * Published unit prices (USD), each with where it was read and when: Workers Paid for the
 * Cloudflare rows, Upstash's pay-as-you-go for Redis. `included` is the monthly allowance.
 */
export const PRICES = {
  doRequests: { perMillion: 0.15, included: 1e6, url: 'https://developers.cloudflare.com/durable-objects/platform/pricing/', read: READ },
  doGbSeconds: { perMillion: 12.5, included: 400_000, url: 'https://developers.cloudflare.com/durable-objects/platform/pricing/', read: READ },
  doRowsWritten: { perMillion: 1.0, included: 50e6, url: 'https://developers.cloudflare.com/durable-objects/platform/pricing/', read: READ, note: 'SQLite-backed: put/delete and each setAlarm are rows written' },
  doRowsRead: { perMillion: 0.001, included: 25e9, url: 'https://developers.cloudflare.com/durable-objects/platform/pricing/', read: READ, note: 'SQLite-backed: each get is a row read' },
  doStorageGbMonth: { perUnit: 0.2, included: 5, url: 'https://developers.cloudflare.com/durable-objects/platform/pricing/', read: READ },
  d1RowsRead: { perMillion: 0.001, included: 25e9, url: 'https://developers.cloudflare.com/d1/platform/pricing/', read: READ },
  d1RowsWritten: { perMillion: 1.0, included: 50e6, url: 'https://developers.cloudflare.com/d1/platform/pricing/', read: READ },
  d1StorageGbMonth: { perUnit: 0.75, included: 5, url: 'https://developers.cloudflare.com/d1/platform/pricing/', read: READ },
  workerRequests: { perMillion: 0.3, included: 10e6, url: 'https://developers.cloudflare.com/workers/platform/pricing/', read: READ },
  workersPaidMinimum: { perMonth: 5, url: 'https://developers.cloudflare.com/workers/platform/pricing/', read: READ },
  upstashCommands: { perMillion: 2.0, included: 0, url: 'https://upstash.com/pricing/redis', read: READ, note: '$0.20 per 100K commands, pay as you go' },
};

/** The workload priced by default: state it wherever its price is quoted. */
export const WORKLOAD = { answersPerMonth: 100_000, tokens: 1000, readers: 1.2, format: 'text', tokensPerSecond: 50, pollSeconds: 1 };

// ---------------------------------------------------------------------------------------
// The answer's text: realistic token sizes (≈4 characters of English per token, some emoji
// and CJK), one model delta per token.

const WORDS = [
  ' the', ' of', ' and', ' to', ' in', ' a', ' is', ' that', ' for', ' it', ' as', ' with', ' be', ' on', ' not', ' this',
  ' stream', ' model', ' reader', ' answer', ' durable', ' object', ' token', ' write', ' each', ' once', ' which', ' because',
  ' however', ' example', ' result', 'ing', 'ed', 'ly', '.', ',', ' (', ')', '\n\n', ' Cloud', 'flare', ' D', '1', ' request',
];
const EMOJI = ['😀', '🚀', '✅', '🇯🇵', '👩‍💻', '🎉'];
const CJK = ['漢字', '日本', '中文', '한국어', 'テキスト'];

/** `tokens` model deltas from seed `seed`: 94% English pieces, 3% emoji, 3% CJK. */
export function answerTokens(tokens, seed = 1) {
  const r = rng(seed);
  return Array.from({ length: tokens }, () => {
    const roll = r();
    return roll < 0.94 ? r.pick(WORDS) : roll < 0.97 ? r.pick(EMOJI) : r.pick(CJK);
  });
}

/** The UI message chunks an AI SDK producer sends for an answer of these text deltas. */
export function uiChunks(deltas, messageId) {
  return [
    { type: 'start', messageId },
    { type: 'start-step' },
    { type: 'text-start', id: 'text-1' },
    ...deltas.map((delta) => ({ type: 'text-delta', id: 'text-1', delta })),
    { type: 'text-end', id: 'text-1' },
    { type: 'finish-step' },
    { type: 'finish' },
  ];
}

/** A source that yields `pieces` at `perSecond` (the model's pace), timed from its first read. */
function pacedSource(pieces, perSecond) {
  let i = 0;
  let start;
  return new ReadableStream({
    async pull(controller) {
      start ??= Date.now();
      if (i >= pieces.length) return controller.close();
      const due = start + (i * 1000) / perSecond;
      if (due > Date.now()) await sleep(due - Date.now()); // the workload's pace, not a synchronization
      controller.enqueue(pieces[i++]);
    },
  });
}

// ---------------------------------------------------------------------------------------
// Reading the counts

/** The object's counts from /stats (200 while it holds the stream, 404 `not_open` after). */
async function objectCounts(stack, id) {
  const res = await fetch(`${stack.baseUrl}/streams/${encodeURIComponent(id)}/stats`, { headers: { authorization: `Bearer ${stack.token(id)}` } });
  const body = await res.json();
  if (!body.meter || !body.d1) throw new Error(`/stats of ${id} carries no meter: ${res.status} ${JSON.stringify(body)}`);
  return { live: res.status === 200, readers: body.readers, checkpoints: body.checkpoints, meter: body.meter, d1: body.d1 };
}

/**
 * Waits until the object is asleep: nothing holding it awake, its alarm run and its lease
 * released (its keys deleted). The sealed stream may still be in its memory (a late reader is
 * served from there until the runtime evicts the idle object; this run's /stats polls keep it
 * from being evicted, and are not counted as awake).
 */
async function asleep(stack, id, ms) {
  let last;
  return until(async () => {
    last = await objectCounts(stack, id);
    return last.meter.holds === 0 && last.meter.alarms >= 1 && last.meter.storage.deletes >= 1 && last;
  }, () => `object ${id} to go to sleep (last: ${JSON.stringify(last)})`, ms);
}

/** `after - before`, field by field, for the nested counters of the meter and D1. */
function minus(after, before) {
  if (typeof after === 'number') return after - (before ?? 0);
  return Object.fromEntries(Object.entries(after).map(([k, v]) => [k, minus(v, before?.[k])]));
}

/** Billable requests: every route but the meter's own `/stats`. */
const billable = (requests) => Object.entries(requests).filter(([k]) => k !== 'stats').reduce((n, [, v]) => n + v, 0);

/** Peak and final D1 footprint of each stream, sampled from the D1 file (no request involved). */
function d1Sampler(db, ids) {
  const peak = new Map(ids.map((id) => [id, { rows: 0, bytes: 0 }]));
  const chunkBytes = `SELECT count(*) AS rows, coalesce(sum(length(CAST(text AS BLOB)) + length(CAST(id AS BLOB)) + length(CAST(streamId AS BLOB)) + 8), 0) AS bytes FROM message_chunks WHERE streamId = ?`;
  const sample = () => {
    for (const id of ids) {
      const { rows, bytes } = db.get(chunkBytes, id);
      const p = peak.get(id);
      if (bytes > p.bytes) Object.assign(p, { rows, bytes });
    }
  };
  const timer = setInterval(sample, 100);
  return {
    stop() {
      clearInterval(timer);
    },
    /** Each stream's peak chunk rows, and its row (and any chunk rows) as they stay. */
    footprint() {
      sample();
      return Object.fromEntries(ids.map((id) => {
        const row = db.get(`SELECT * FROM messages WHERE id = ?`, id);
        // Each column's bytes: text as UTF-8, a number as 8 (SQLite's own record overhead aside).
        const rowBytes = Object.values(row).reduce((n, v) => n + (typeof v === 'string' ? Buffer.byteLength(v) : v === null ? 0 : 8), 0);
        const left = db.get(chunkBytes, id);
        return [id, { peakChunkRows: peak.get(id).rows, peakChunkBytes: peak.get(id).bytes, finalBodyBytes: Buffer.byteLength(row.body), finalChunkRows: left.rows, finalBytes: rowBytes + left.bytes }];
      }));
    },
  };
}

/**
 * What the stack's stream objects keep in their own SQLite storage once their answers are over,
 * summed over every object (one per answer): their keys (the storage API's `_cf_KV` table, gone
 * when an object deleted everything) and the files' sizes. Local objects are one SQLite file
 * each; a copy is read, never the live file.
 */
function objectStorage(persistDir) {
  const dir = join(persistDir, 'v3', 'do', 'rindle-streams-StreamObject');
  const out = { objects: 0, keys: 0, keyValueBytes: 0, fileBytes: 0 };
  if (!existsSync(dir)) return out;
  const scratch = mkdtempSync(join(os.tmpdir(), 'rindle-cost-do-'));
  try {
    for (const f of readdirSync(dir).filter((f) => /^[0-9a-f]{64}\.sqlite$/.test(f))) {
      const copy = join(scratch, f);
      copyFileSync(join(dir, f), copy);
      if (existsSync(join(dir, `${f}-wal`))) copyFileSync(join(dir, `${f}-wal`), `${copy}-wal`);
      const db = openSqlite(copy);
      try {
        db.exec('PRAGMA wal_checkpoint(TRUNCATE)');
        const hasKv = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_cf_KV'").get();
        const kv = hasKv ? db.prepare('SELECT key, value FROM _cf_KV').all() : [];
        out.objects += 1;
        out.keys += kv.length;
        out.keyValueBytes += kv.reduce((n, r) => n + Buffer.byteLength(r.key) + Buffer.from(r.value).length, 0);
        out.fileBytes += pragmaValue(db, 'page_count') * pragmaValue(db, 'page_size');
      } finally {
        db.close();
      }
    }
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// One answer

/** Attaches `n` readers of `format` that close on `end`; resolves with their texts. */
function startReaders(stack, id, format, n) {
  const token = stack.token(id, 'read cancel');
  return Array.from({ length: n }, () => {
    if (format === 'ui') {
      return (async () => {
        const chunks = [];
        const stream = readUIStream({ streamId: id, token, streamsUrl: stack.baseUrl });
        for await (const chunk of stream) chunks.push(chunk);
        return chunks;
      })();
    }
    const handle = followStream({ streamId: id, token, baseUrl: stack.baseUrl, EventSourceImpl: EventSource });
    return handle.done.then((state) => state.text);
  });
}

async function runAnswer(stack, spec, { tokensPerSecond, log, sleepMs }) {
  const { format, tokens, readers } = spec;
  const id = spec.id;
  const deltas = answerTokens(tokens, tokens); // the same answer for every reader count and format
  const pieces = format === 'ui' ? uiChunks(deltas, id) : deltas;
  const produced = format === 'ui' ? pieces.map((c) => `${JSON.stringify(c)}\n`).join('') : deltas.join('');
  const began = Date.now();
  const producer = await openStream({ baseUrl: stack.baseUrl, streamId: id, token: stack.token(id), format });
  const readings = startReaders(stack, id, format, readers);
  // The readers are attached (the object counts them) before the model's first token.
  await until(async () => (await objectCounts(stack, id)).readers === readers, `${readers} readers of ${id} to attach`, 30_000);
  const streamStart = Date.now();
  const end = await producer.pipe(pacedSource(pieces, tokensPerSecond));
  const closedAt = Date.now();
  if (end.status !== 'complete' || end.seq !== produced.length) throw new Error(`${id}: ended ${JSON.stringify(end)}, produced ${produced.length} units`);
  const texts = await Promise.all(readings);
  const sealed = await objectCounts(stack, id); // lingering: the live stream's own counters are still here
  if (!sealed.live) throw new Error(`${id} retired before its readers ended: lengthen LINGER_MS`);
  for (const t of texts) {
    const got = format === 'ui' ? t.filter((c) => c.type === 'text-delta').map((c) => c.delta).join('') : t;
    if (got !== deltas.join('')) throw new Error(`${id}: a reader got ${got.length} characters, not the answer's ${deltas.join('').length}`);
  }
  const finished = await asleep(stack, id, sleepMs);
  log(`${id}: ${tokens} tokens, ${readers} readers, streamed in ${((closedAt - streamStart) / 1000).toFixed(1)} s, asleep ${((Date.now() - closedAt) / 1000).toFixed(1)} s after close`);
  // A late reader of the finished answer: what one costs after the object went to sleep.
  const lateUrl = `${stack.baseUrl}/streams/${encodeURIComponent(id)}/${format === 'ui' ? 'ui' : 'text'}?token=${encodeURIComponent(stack.token(id, 'read'))}`;
  const late = await fetch(lateUrl);
  const lateBody = await late.text();
  if (late.status !== 200 || !lateBody.length) throw new Error(`late read of ${id}: ${late.status} ${lateBody.slice(0, 200)}`);
  const afterLate = await asleep(stack, id, sleepMs);
  return {
    ...spec,
    deltas: pieces.length,
    units: produced.length,
    utf8Bytes: Buffer.byteLength(produced),
    streamMs: closedAt - streamStart,
    openToCloseMs: closedAt - began,
    checkpoints: sealed.checkpoints,
    answer: { meter: finished.meter, d1: finished.d1 },
    lateRead: minus({ meter: afterLate.meter, d1: afterLate.d1 }, { meter: finished.meter, d1: finished.d1 }),
  };
}

// ---------------------------------------------------------------------------------------
// The designs beside it: formulas from documented or source behaviour, not runs.

/**
 * Every delta written to D1 as it arrives (one INSERT per delta into a chunk table indexed by
 * stream and position: D1 counts the row and its index entry, "Indexes will add an additional
 * written row"), the finished text written to the message row once; readers poll through a
 * Worker every `pollSeconds` and each poll reads the rows it returns plus the index probe.
 * Deleting the chunk rows afterwards would write as many rows again (not counted).
 */
export function naiveD1({ deltas, readers, seconds, pollSeconds = 1 }) {
  const polls = readers * (Math.ceil(seconds / pollSeconds) + 1);
  return { workerRequests: 1 + polls, d1RowsWritten: 2 * deltas + 1, d1RowsRead: readers * deltas + polls, doRequests: 0, doGbSeconds: 0 };
}

/**
 * Every delta put into the object's own storage (one `put` per delta: a row written on a
 * SQLite-backed object) by one streaming append, readers subscribed by SSE to the object, the
 * finished text written to D1 once; the object is awake while the answer streams.
 */
export function naiveObjectStorage({ deltas, readers, seconds }) {
  return { workerRequests: 3 + readers, doRequests: 3 + readers, doGbSeconds: OBJECT_GB * seconds, doRowsWritten: deltas, d1RowsWritten: 1 };
}

/**
 * `resumable-stream` 2.2.12 (vercel/resumable-stream, src/runtime.ts), as the AI SDK's
 * resumable-streams guide uses it: the POST that runs the model calls
 * `createNewResumableStream` (SET sentinel EX 24 h, SUBSCRIBE to its request channel), and
 * returns the stream to its own client directly, so the first reader costs no command per
 * chunk; every other reader (a second tab, a reload) calls `resumeExistingStream` (GET
 * sentinel, SUBSCRIBE its own channel, PUBLISH a request; the producer PUBLISHes the replay,
 * the reader UNSUBSCRIBEs at the end): 5 commands, plus one PUBLISH per chunk for as long as
 * it follows. At the end the producer SETs the sentinel to DONE, UNSUBSCRIBEs and PUBLISHes
 * DONE to each follower. The text lives in the producer's memory only: nothing is durable
 * before the app saves the finished message.
 */
export function resumableStreamRedis({ deltas, readers }) {
  const followers = Math.max(0, readers - 1);
  return { redisCommands: 2 + 2 + followers * (deltas + 1 + 5) };
}

/** rindle's counts for one answer, as the table and the prices use them. */
export function rindleUnits(a) {
  const m = a.answer.meter;
  const s = m.storage;
  return {
    workerRequests: billable(m.requests),
    doRequests: billable(m.requests) + m.alarms,
    doGbSeconds: (OBJECT_GB * m.awakeMs) / 1000,
    doRowsWritten: s.puts + s.deletes + s.setAlarms,
    doRowsRead: s.gets,
    d1RowsWritten: a.answer.d1.rowsWritten,
    d1RowsRead: a.answer.d1.rowsRead,
  };
}

/** Monthly price of `units` per answer × `answers`: the list price, and beyond the allowances. */
export function monthly(units, answers) {
  const unit = {
    workerRequests: PRICES.workerRequests, doRequests: PRICES.doRequests, doGbSeconds: PRICES.doGbSeconds,
    doRowsWritten: PRICES.doRowsWritten, doRowsRead: PRICES.doRowsRead, d1RowsWritten: PRICES.d1RowsWritten,
    d1RowsRead: PRICES.d1RowsRead, redisCommands: PRICES.upstashCommands,
  };
  const lines = {};
  let list = 0;
  let billed = 0;
  for (const [k, perAnswer] of Object.entries(units)) {
    if (!unit[k] || !perAnswer) continue;
    const total = perAnswer * answers;
    const l = (total / 1e6) * unit[k].perMillion;
    const b = (Math.max(0, total - unit[k].included) / 1e6) * unit[k].perMillion;
    lines[k] = { perMonth: total, list: l, billed: b };
    list += l;
    billed += b;
  }
  return { lines, list, billed };
}

/**
 * Per-answer units of the workload (`readers` may be fractional: the counts are linear in the
 * readers, so the 1- and 10-reader runs of the same size and format give the per-reader share).
 */
function perAnswerAt(one, ten, readers) {
  const share = (readers - one.readers) / (ten.readers - one.readers);
  return Object.fromEntries(Object.keys(one).filter((k) => k !== 'readers').map((k) => [k, one[k] + share * (ten[k] - one[k])]));
}

// ---------------------------------------------------------------------------------------

function commitOf() {
  try {
    return execFileSync('git', ['-C', ROOT, 'rev-parse', '--short', 'HEAD']).toString().trim();
  } catch {
    return 'unknown';
  }
}

/**
 * Runs every answer (`tokens` × `readers` × `formats`) at once on one stack, then the late
 * reads; `vars` override the Worker's (the smoke test shortens the linger and the lease).
 */
export async function runCost({ tokens = [1000, 10_000], readers = [1, 10], formats = ['text', 'ui'], tokensPerSecond = WORKLOAD.tokensPerSecond, vars = {}, log = () => {} } = {}) {
  // Served bare (bench/bare-serve.mjs: the same config, miniflare and workerd, without wrangler
  // dev's proxy and inspector, which relays every reader's every write and gave out under eight
  // answers and 44 readers at once). The counts do not depend on it; the pace does.
  const stack = await startStack({ name: 'cost', vars, bare: true });
  try {
    const cfg = { LINGER_MS: 30_000, LEASE_MS: 10_000, CHECKPOINT_CHARS: 512, UI_CHECKPOINT_CHARS: 4096, CHECKPOINT_INTERVAL_MS: 750, ...Object.fromEntries(Object.entries(vars).map(([k, v]) => [k, Number(v)])) };
    const specs = formats.flatMap((format) => tokens.flatMap((t) => readers.map((r) => ({ format, tokens: t, readers: r }))));
    for (const s of specs) s.id = newStream(stack, `cost-${s.format}-${s.tokens}t-${s.readers}r`);
    const longest = Math.max(...tokens) / tokensPerSecond;
    const sleepMs = 60_000 + cfg.LINGER_MS + 2 * cfg.LEASE_MS + longest * 1000;
    const sampler = d1Sampler(stack.db, specs.map((s) => s.id));
    log(`${specs.length} answers at ${tokensPerSecond} tokens/s on one stack (the longest streams ${longest.toFixed(0)} s, then the ${cfg.LINGER_MS / 1000} s linger)`);
    const answers = await Promise.all(specs.map((s) => runAnswer(stack, s, { tokensPerSecond, log, sleepMs }))).finally(() => sampler.stop());
    const footprint = sampler.footprint();
    for (const a of answers) Object.assign(a, { d1Storage: footprint[a.id] });
    // Once every lease was released (the runs waited out the linger and an alarm after it).
    const kept = objectStorage(stack.persistDir);
    return { commit: commitOf(), date: new Date().toISOString(), machine: { cpus: os.cpus().length, node: process.version }, tokensPerSecond, config: cfg, prices: PRICES, answers, objectStorage: kept };
  } finally {
    await stack.stop();
  }
}

/** The comparison and the workload's price, from a run's counted answers. */
export function analyse(report, workload = WORKLOAD) {
  const rows = report.answers.map((a) => {
    const seconds = a.tokens / report.tokensPerSecond;
    const shape = { deltas: a.deltas, readers: a.readers, seconds, pollSeconds: workload.pollSeconds };
    return { format: a.format, tokens: a.tokens, readers: a.readers, rindle: rindleUnits(a), naiveD1: naiveD1(shape), naiveObjectStorage: naiveObjectStorage(shape), redis: resumableStreamRedis(shape) };
  });
  const find = (r) => rows.find((x) => x.format === workload.format && x.tokens === workload.tokens && x.readers === r);
  const [one, ten] = [find(Math.min(...rows.map((r) => r.readers))), find(Math.max(...rows.map((r) => r.readers)))];
  let price = null;
  if (one && ten && one !== ten) {
    price = {};
    for (const design of ['rindle', 'naiveD1', 'naiveObjectStorage', 'redis']) {
      const units = perAnswerAt({ readers: one.readers, ...one[design] }, { readers: ten.readers, ...ten[design] }, workload.readers);
      price[design] = { perAnswer: units, ...monthly(units, workload.answersPerMonth) };
    }
  }
  return { workload, rows, price };
}

const fmt = (n, d = 0) => (n === undefined || n === null ? '–' : Number(n).toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d }));

export function formatReport(report, analysis = analyse(report)) {
  const out = [];
  out.push(`commit ${report.commit}, ${report.date}, ${report.machine.cpus} CPUs, Node ${report.machine.node}; ${report.tokensPerSecond} tokens/s; config ${JSON.stringify(report.config)}`);
  out.push('', 'rindle-streams, counted (per answer; requests: open + append + close + the producer watch (one per 20 s) + reader GETs, then alarm invocations):');
  out.push('| format | tokens | readers | chars | streamed s | DO requests | alarms | awake s | GB-s | DO rows written / read | D1 rows written / read | checkpoints | D1 peak chunk rows (bytes) | D1 kept bytes |');
  out.push('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const a of report.answers) {
    const u = rindleUnits(a);
    const s = a.answer.meter.storage;
    out.push(`| ${a.format} | ${fmt(a.tokens)} | ${a.readers} | ${fmt(a.units)} | ${fmt(a.streamMs / 1000, 1)} | ${fmt(u.doRequests)} (${Object.entries(a.answer.meter.requests).filter(([k]) => k !== 'stats').map(([k, v]) => `${k} ${v}`).join(', ')}) | ${a.answer.meter.alarms} | ${fmt(a.answer.meter.awakeMs / 1000, 1)} | ${fmt(u.doGbSeconds, 2)} | ${fmt(u.doRowsWritten)} (${s.puts} put, ${s.deletes} delete, ${s.setAlarms} setAlarm) / ${fmt(u.doRowsRead)} | ${fmt(u.d1RowsWritten)} / ${fmt(u.d1RowsRead)} | ${fmt(a.checkpoints)} | ${fmt(a.d1Storage?.peakChunkRows)} (${fmt(a.d1Storage?.peakChunkBytes)}) | ${fmt(a.d1Storage?.finalBytes)} |`);
  }
  const kept = report.objectStorage;
  if (kept) out.push('', `Left behind in the objects' own storage once every answer was over: ${kept.keys} keys, ${fmt(kept.keyValueBytes)} bytes of keys and values, over ${kept.objects} objects (their SQLite files: ${fmt(kept.fileBytes)} bytes, the local runtime's empty-database pages).`);
  out.push('', 'A late reader of a finished answer (after the object went to sleep): /text for text, /ui for ui:');
  for (const a of report.answers.filter((x) => x.readers === Math.min(...report.answers.map((y) => y.readers)))) {
    const l = a.lateRead;
    out.push(`  ${a.format} ${fmt(a.tokens)} tokens: DO requests ${billable(l.meter.requests)}, awake ${fmt(l.meter.awakeMs)} ms, DO rows read ${l.meter.storage.gets}, D1 rows read ${l.d1.rowsRead} in ${l.d1.rounds} queries`);
  }
  out.push('', 'Beside it (formulas: naive D1 and object storage from Cloudflare\'s documented billing; Redis from resumable-stream\'s source):');
  out.push('| format | tokens | readers | rindle: DO req, GB-s, D1 rows written | every delta to D1: Worker req, D1 rows written / read | every delta to DO storage: DO req, GB-s, DO rows written | resumable-stream: Redis commands |');
  out.push('|---|---|---|---|---|---|---|');
  for (const r of analysis.rows) {
    out.push(`| ${r.format} | ${fmt(r.tokens)} | ${r.readers} | ${fmt(r.rindle.doRequests)}, ${fmt(r.rindle.doGbSeconds, 2)}, ${fmt(r.rindle.d1RowsWritten)} | ${fmt(r.naiveD1.workerRequests)}, ${fmt(r.naiveD1.d1RowsWritten)} / ${fmt(r.naiveD1.d1RowsRead)} | ${fmt(r.naiveObjectStorage.doRequests)}, ${fmt(r.naiveObjectStorage.doGbSeconds, 2)}, ${fmt(r.naiveObjectStorage.doRowsWritten)} | ${fmt(r.redis.redisCommands)} |`);
  }
  if (analysis.price) {
    const w = analysis.workload;
    out.push('', `Monthly price of ${fmt(w.answersPerMonth)} ${w.format} answers of ${fmt(w.tokens)} tokens at ${report.tokensPerSecond} tokens/s, ${w.readers} readers on average (USD; list = every unit at its price; billed = beyond the Workers Paid allowances, before the $5 minimum):`);
    for (const [design, p] of Object.entries(analysis.price)) {
      out.push(`  ${design.padEnd(20)} list $${fmt(p.list, 2)}, billed $${fmt(p.billed, 2)}   ${Object.entries(p.lines).map(([k, v]) => `${k} ${fmt(v.perMonth)}: $${fmt(v.list, 2)}`).join('; ')}`);
    }
  }
  return out.join('\n');
}

// ---------------------------------------------------------------------------------------

const isMain = process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1];
if (isMain) {
  const { values } = parseArgs({
    options: {
      tps: { type: 'string', default: String(WORKLOAD.tokensPerSecond) },
      tokens: { type: 'string', default: '1000,10000' },
      readers: { type: 'string', default: '1,10' },
      formats: { type: 'string', default: 'text,ui' },
      json: { type: 'boolean', default: false },
      'no-save': { type: 'boolean', default: false },
      report: { type: 'string' },
    },
  });
  if (values.report) {
    const saved = JSON.parse(readFileSync(values.report, 'utf8'));
    console.log(formatReport(saved));
    process.exit(0);
  }
  const list = (s) => s.split(',').map((x) => x.trim()).filter(Boolean);
  const report = await runCost({
    tokensPerSecond: Number(values.tps),
    tokens: list(values.tokens).map(Number),
    readers: list(values.readers).map(Number),
    formats: list(values.formats),
    log: (line) => console.error(line),
  });
  const analysis = analyse(report);
  if (!values['no-save']) {
    const dir = join(ROOT, 'bench', 'results');
    mkdirSync(dir, { recursive: true });
    const file = join(dir, `${report.date.slice(0, 10)}-${report.commit}-cost.json`);
    writeFileSync(file, `${JSON.stringify({ ...report, analysis }, null, 2)}\n`);
    console.error(`wrote ${file} (${statSync(file).size} bytes)`);
  }
  console.log(values.json ? JSON.stringify({ ...report, analysis }, null, 2) : formatReport(report, analysis));
}
