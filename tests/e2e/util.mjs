// The one family of e2e helpers (tests/e2e/*.test.mjs, bench/): randomness and emoji-heavy
// text, stream ids with their message rows, D1 reads, an API client over fetch and a raw
// one-connection request, the strict frame checker (SPEC §3 and contract S), a proxy that
// cuts SSE answers at planned places on the wire, and a hold that keeps a producer running
// elsewhere from ending until the test lets it. Everything here talks to the real Worker
// started by harness.mjs; nothing is mocked. SSE is parsed by harness.mjs's `sseParser` (the
// `eventsource-parser` package).
import assert from 'node:assert/strict';
import http from 'node:http';
import { jsonOrUndefined, readSse, sseParser } from './harness.mjs';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Polls `probe()` until it returns something truthy, and returns that; fails naming `what` (a
 * string, or a function called at the failure, for state only known then) after `ms`. For state
 * that announces itself by no event (a D1 row, a log file, another process).
 */
export async function until(probe, what, ms = 10_000, every = 25) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > end) assert.fail(`timed out after ${ms} ms waiting for ${typeof what === 'function' ? what() : what}`);
    await sleep(every);
  }
}

/** `promise`, or a rejection with `message()` after `ms` (the timer never outlives it). */
export function withTimeout(promise, ms, message) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(typeof message === 'function' ? message() : message)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// ---------------------------------------------------------------------------------------
// Randomness: seeded, so a failure can be replayed with E2E_SEED=<seed>.

/** mulberry32: a tiny deterministic PRNG returning floats in [0, 1). */
export function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  next.int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)); // inclusive
  next.pick = (arr) => arr[Math.floor(next() * arr.length)];
  next.chance = (p) => next() < p;
  return next;
}

/** The seed for this run: E2E_SEED if set, else random (print it in failure messages). */
export function seedFromEnv() {
  const s = process.env.E2E_SEED;
  return s ? Number(s) >>> 0 : (Math.random() * 2 ** 32) >>> 0;
}

// ---------------------------------------------------------------------------------------
// Emoji-heavy text

/** Pieces of text that stress UTF-16 ↔ UTF-8 conversion, JSON and SSE framing. */
export const HARD_PIECES = [
  '😀', '🎉', '🚀', '💩', '🦀', '𝄞', '𠜎', // astral: surrogate pairs in UTF-16, 4 bytes in UTF-8
  '👨‍👩‍👧‍👦', '🏳️‍🌈', '👩🏽‍💻', '🧑‍🤝‍🧑', '❤️‍🔥', '🐻‍❄️', // ZWJ sequences
  '🇯🇵', '🇫🇷', '🇺🇸', '🇧🇷', '🏴󠁧󠁢󠁳󠁣󠁴󠁿', // flags (regional indicators, tag sequence)
  '👍🏽', '👋🏿', '🤌🏻', '✊🏾', // skin tones
  'e\u0301', 'a\u0308', 'n\u0303', 'Z\u0351\u0360\u0347\u0325', 'o\u0336\u0337', // combining marks
  '1️⃣', '#️⃣', '©️', '☺︎', // keycaps, variation selectors
  '漢字', '한국어', 'नमस्ते', 'مرحبا', 'עברית', 'ไทย', 'Ελληνικά', // other scripts
  '€', '£', 'ß', 'ﬁ', '\u00a0', '\ufeff', '\u2028', '\u2029', // BMP oddities
  '\n', '\n\n', '\r\n', '\t', '"', '\\', '\\n', '</script>', 'data: x\n\n', 'id: 99\n', ': ping\n', // framing traps
];
const WORDS = ['the', 'model', 'streams', 'a', 'reply', 'to', 'every', 'reader', 'at', 'once', 'and', 'D1', 'keeps', 'it'];

/** Emoji-heavy text of at least `minUnits` UTF-16 code units. */
export function emojiText(r, minUnits) {
  let s = '';
  while (s.length < minUnits) {
    const roll = r();
    if (roll < 0.55) s += r.pick(HARD_PIECES);
    else if (roll < 0.9) s += r.pick(WORDS);
    else s += String.fromCodePoint(r.int(0x1f300, 0x1f64f)); // any emoji from the big blocks
    if (r() < 0.5) s += ' ';
  }
  return s;
}

export const isHigh = (c) => c >= 0xd800 && c <= 0xdbff;
export const isLow = (c) => c >= 0xdc00 && c <= 0xdfff;
/** True when UTF-16 offset `i` of `s` falls between the two halves of a surrogate pair. */
export const insidePair = (s, i) => i > 0 && i < s.length && isHigh(s.charCodeAt(i - 1)) && isLow(s.charCodeAt(i));

/**
 * Split `s` into pieces of `min`..`max` UTF-16 units, never inside a surrogate pair (each
 * piece is valid UTF-8 on its own), but freely inside grapheme clusters (ZWJ, flags, marks).
 */
export function splitCodePoints(s, r, min = 1, max = 40) {
  const out = [];
  let i = 0;
  while (i < s.length) {
    let j = Math.min(s.length, i + r.int(min, max));
    if (insidePair(s, j)) j += 1;
    out.push(s.slice(i, j));
    i = j;
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Text checks

/** The first UTF-16 offset where `a` and `b` differ (or the shorter length). */
export function divergence(a, b) {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}

/** Assert `prefix` is a prefix of `whole`, with a readable message when it is not. */
export function assertPrefix(prefix, whole, what) {
  if (whole.startsWith(prefix)) return;
  const at = divergence(prefix, whole);
  assert.fail(
    `${what}: not a prefix (lengths ${prefix.length} vs ${whole.length}; first difference at UTF-16 offset ${at}: ` +
      `${JSON.stringify(prefix.slice(Math.max(0, at - 10), at + 10))} vs ${JSON.stringify(whole.slice(Math.max(0, at - 10), at + 10))})`,
  );
}

// ---------------------------------------------------------------------------------------
// Stream ids, message rows and D1

let idCounter = 0;
/** A fresh, unique, valid stream id (letters, digits, - and :), without a row. */
export function uniqueId(prefix = 's') {
  return `${prefix}-${process.pid}-${++idCounter}-${Math.random().toString(36).slice(2, 8)}`;
}

/** Inserts the message row of `id` (what the app does before opening) and returns the id. */
export function insertRow(stack, id) {
  stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES (?, 'c1', 'assistant')`, id);
  return id;
}

/** A fresh stream id with its message row inserted. */
export function newStream(stack, prefix = 's') {
  return insertRow(stack, uniqueId(prefix));
}

/** The message row and chunk rows of a stream, straight from the local D1 file. */
export function rows(stack, id) {
  return {
    row: stack.db.get(`SELECT * FROM messages WHERE id = ?`, id),
    chunks: stack.db.all(`SELECT * FROM message_chunks WHERE streamId = ? ORDER BY seq`, id),
  };
}

/** Every row of both tables, in a stable order, for "nothing was written" checks. */
export function d1Snapshot(db) {
  return {
    messages: db.all(`SELECT * FROM messages ORDER BY id`),
    chunks: db.all(`SELECT * FROM message_chunks ORDER BY streamId, seq, id`),
  };
}

// ---- the `ui` format (SPEC §9): NDJSON text of AI SDK UI message chunks

/** The NDJSON text of UI message chunks: one JSON line each. */
export const ndjson = (chunks) => chunks.map((c) => `${JSON.stringify(c)}\n`).join('');

/** The chunks of a `ui` stream's text: its complete lines, parsed (an unfinished last line never becomes one). */
export const uiChunksOf = (text) => text.split('\n').slice(0, -1).map((line) => JSON.parse(line));

/**
 * The UI message the real `ai` package's `readUIMessageStream` builds from `chunks` (its last
 * snapshot), and the errors it reports. (`ai` is imported here on first use, so the e2e files
 * that never read a UI message do not load it.)
 */
export async function uiMessageOf(chunks) {
  const { readUIMessageStream } = await import('ai');
  const stream = new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(structuredClone(chunk));
      controller.close();
    },
  });
  let message;
  const errors = [];
  for await (const snapshot of readUIMessageStream({ stream, onError: (e) => errors.push(e.message) })) message = snapshot;
  return { message, errors };
}

/**
 * The durable text straight from D1: the row's body followed by its chunk rows in seq order,
 * taking only the contiguous prefix (what SPEC §5 calls the durable text). `null` without a
 * row. An oracle written from the SPEC, independent of the Worker's and client.js's assemblers.
 */
export function durableFromDb(db, id) {
  const row = db.get(`SELECT body, status, seq, cancel, error FROM messages WHERE id = ?`, id);
  if (!row) return null;
  const chunks = db.all(`SELECT seq, text FROM message_chunks WHERE streamId = ? ORDER BY seq`, id);
  let text = row.body ?? '';
  for (const c of chunks) {
    const from = c.seq - c.text.length;
    if (from > text.length) break; // a gap: stop (never happens with a correct writer)
    if (c.seq > text.length) text += c.text.slice(text.length - from);
  }
  return { text, row, chunks };
}

// ---------------------------------------------------------------------------------------
// HTTP and the API

/** { status, headers, raw, json } of a fetch. */
export async function call(url, init = {}) {
  const res = await fetch(url, init);
  const raw = await res.text();
  return { status: res.status, headers: res.headers, raw, json: jsonOrUndefined(raw) };
}

/**
 * One request on its own connection (`Connection: close`, no agent), the path sent exactly as
 * given (no URL normalisation by the client). Resolves { status, headers, raw, json, error }
 * (`headers` a plain object; status 0 and `error` when there was no answer). `readLimit` stops
 * reading after that many bytes, `until(textSoFar)` as soon as it returns true (SSE answers).
 */
export function rawRequest(baseUrl, { method = 'GET', path, headers = {}, body, timeoutMs = 15_000, readLimit = Infinity, until } = {}) {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve) => {
    let settled = false;
    const done = (v) => {
      if (!settled) {
        settled = true;
        clearTimeout(timer);
        resolve(v);
      }
    };
    const req = http.request({ host: hostname, port, method, path, agent: false, headers: { connection: 'close', ...headers } }, (res) => {
      const bufs = [];
      let size = 0;
      const finish = () => {
        const raw = Buffer.concat(bufs).toString('utf8');
        const json = jsonOrUndefined(raw);
        done({ status: res.statusCode, headers: res.headers, raw, json });
      };
      res.on('data', (c) => {
        bufs.push(c);
        size += c.length;
        if (size >= readLimit || (until && until(Buffer.concat(bufs).toString('utf8')))) {
          finish();
          res.destroy();
        }
      });
      res.on('end', finish);
      res.on('close', finish);
      res.on('error', finish);
    });
    const timer = setTimeout(() => {
      req.destroy();
      done({ status: 0, error: `no answer within ${timeoutMs} ms` });
    }, timeoutMs);
    req.on('error', (e) => done({ status: 0, error: e.message }));
    if (body !== undefined) req.end(body);
    else req.end();
  });
}

/**
 * An API client for one stream (SPEC §4). Producer calls send `Authorization: Bearer`;
 * reader calls (`text`, `events`, `ui`) pass `?token=`, as a browser's EventSource must, with
 * a read-only token (a token in a URL may not write: SPEC §12): `readToken`, by default the
 * given `token` when one is given, else a `read` token for the stream.
 */
export function api(stack, id, { token, readToken } = {}) {
  readToken ??= token ?? stack.token(id, 'read');
  token ??= stack.token(id);
  const url = (action, query = '') => `${stack.baseUrl}/streams/${encodeURIComponent(id)}/${action}${query}`;
  const auth = { authorization: `Bearer ${token}` };
  const post = (action, body, headers = {}) => call(url(action), { method: 'POST', headers: { ...auth, ...headers }, body });
  const queryToken = () => encodeURIComponent(readToken);
  const readUrl = (action) => (from) => url(action, `?${from === undefined ? '' : `from=${from}&`}token=${queryToken()}`);
  const eventsUrl = readUrl('events');
  const uiUrl = readUrl('ui');
  /** `format`: 'text' (the default) or 'ui' (SPEC §9). */
  const open = (meta, format) => {
    if (meta === undefined && format === undefined) return post('open');
    return post('open', JSON.stringify({ format, meta }), { 'content-type': 'application/json' });
  };
  return {
    id,
    url,
    token,
    readToken,
    open,
    append: (text) => post('append', text, { 'content-type': 'text/plain; charset=utf-8' }),
    flush: () => post('flush'),
    close: () => post('close'),
    fail: (error) => post('fail', JSON.stringify({ error }), { 'content-type': 'application/json' }),
    cancel: () => post('cancel'),
    stats: () => call(url('stats'), { headers: auth }),
    text: () => call(url('text', `?token=${queryToken()}`)),
    eventsUrl,
    /**
     * A subscription (harness.mjs's readSse), resolved once the server's first frame (`open`,
     * or `absent`) has arrived: the reader is attached, so whatever the test does next (append,
     * close, kill) happens after its join.
     */
    async events(from, opts) {
      const sse = await readSse(eventsUrl(from), opts);
      if (sse.status === 200) await withTimeout(sse.attached, 10_000, () => `no first frame from ${eventsUrl(from)} within 10 s`);
      return sse;
    },
    uiUrl,
    /**
     * A `/ui` subscription, resolved once its `retry:` line has arrived: a live stream with no
     * complete line yet sends no event, but the body has started, so the reader is attached.
     */
    async ui(from, opts) {
      const sse = await readSse(uiUrl(from), opts);
      if (sse.status === 200) await sse.next((f) => f.retry !== undefined || f.data !== undefined);
      return sse;
    },
  };
}

/** Assert a 200 answer (of `call` or `rawRequest`) and return its JSON. */
export function ok(res, what = 'request') {
  assert.equal(res.status, 200, `${what}: ${res.status} ${res.raw ?? res.error}`);
  return res.json;
}

/** Assert a JSON error answer (SPEC §4) with `status` and `code`; returns its JSON. */
export function isError(res, status, code, what = 'request') {
  assert.equal(res.status, status, `${what}: expected ${status} ${code}, got ${res.status} ${res.raw ?? res.error}`);
  const type = typeof res.headers?.get === 'function' ? res.headers.get('content-type') : res.headers?.['content-type'];
  assert.match(type ?? '', /^application\/json/, `${what}: content-type`);
  assert.equal(res.json?.error, code, `${what}: ${res.raw}`);
  assert.equal(typeof res.json.message, 'string', `${what}: message`);
  assert.ok(res.json.message.length > 0, `${what}: empty message`);
  return res.json;
}

/**
 * Assert an error whose detail the Worker keeps to its log (a configuration's fault, a store's
 * error): `status` and `code`, a `requestId`, a body naming none of `details`, and a log line
 * under that id naming every one of them. Returns the body.
 */
export async function isLoggedError(stack, res, status, code, details, what = 'request') {
  const body = isError(res, status, code, what);
  assert.match(body.requestId ?? '', /^[0-9a-f]{16}$/, `${what}: a requestId: ${res.raw}`);
  for (const d of details) assert.ok(!res.raw.includes(d), `${what}: the body names ${d}: ${res.raw}`);
  const line = (await stack.waitForLog(new RegExp(`^.*"requestId":"${body.requestId}".*$`, 'm')))[0];
  const logged = JSON.parse(line.slice(line.indexOf('{'), line.lastIndexOf('}') + 1));
  for (const d of details) assert.ok(logged.detail.includes(d), `${what}: the log line under ${body.requestId} names ${d}: ${line}`);
  return body;
}

// ---------------------------------------------------------------------------------------
// Reading frames

/** Parse a whole SSE body into { id, data, json, retry, comment } records (like readSse's frames). */
export function parseSse(raw) {
  const out = [];
  sseParser((record) => out.push(record)).push(raw.endsWith('\n') ? raw : `${raw}\n`);
  return out;
}

/**
 * GET an SSE url and read the WHOLE body (the server must end it within `ms`, as it does
 * after `end` or `absent`); returns { status, headers, raw, frames }.
 */
export async function readWholeSse(url, ms = 10_000) {
  const res = await fetch(url, { signal: AbortSignal.timeout(ms) });
  const raw = await res.text();
  return { status: res.status, headers: res.headers, raw, frames: parseSse(raw) };
}

const isTerminal = (f) => f.json && (f.json.type === 'end' || f.json.type === 'absent' || f.json.type === 'stale');

/** Wait for the stream's `end` (or `absent`/`stale`) frame; returns the SSE reader's data frames. */
export async function untilEnd(sse, ms = 30_000) {
  await sse.next(isTerminal, ms);
  sse.close();
  return sse.frames.filter((f) => f.data !== undefined);
}

/**
 * Checks one reader's data frames against SPEC §3 and, given `produced`, contract S:
 *   durableText.slice(0, open.from) ++ concat(chunks) == produced
 *
 * `opts` is a label, or { label, produced, durableText = produced, asked, requireEnd }:
 * `durableText` is what the reader read from /text before joining (a prefix of produced that
 * covers the join offset), `asked` the offset it asked for (checked against open.from, moved
 * down out of a surrogate pair), `requireEnd` (default: true when `produced` is given) that
 * it saw `end` and the splice is the whole produced text (else only a prefix of it).
 *
 * Asserts: open first with `id: <from>`; every chunk has `id: <seq>`, `text.length == seq -
 * from`, is not empty and starts where the previous one ended; durable/end carry no id and
 * never claim more than was delivered; durable seqs never go backwards; nothing follows `end`.
 * Returns { open, text (the chunk texts, covering [open.from, cursor)), end, durables, cursor }.
 */
export function checkFrames(frames, opts = {}) {
  const { label = 'reader', produced, durableText = produced, asked, requireEnd = produced !== undefined } =
    typeof opts === 'string' ? { label: opts } : opts;
  const data = frames.filter((f) => f.data !== undefined);
  assert.ok(data.length > 0, `${label}: no frames`);
  const open = data[0].json;
  assert.equal(open?.type, 'open', `${label}: first frame ${data[0].data}`);
  assert.equal(data[0].id, String(open.from), `${label}: open carries id: <from>`);
  assert.ok(open.from <= open.seq, `${label}: open.from ${open.from} > open.seq ${open.seq}`);
  if (asked !== undefined) {
    const want = Math.min(asked, open.seq);
    const expected = produced !== undefined && insidePair(produced, want) ? want - 1 : want;
    assert.equal(open.from, expected, `${label}: asked from ${asked} (seq ${open.seq}), open.from ${open.from}`);
  }
  if (durableText !== undefined) {
    assert.ok(open.from <= durableText.length, `${label}: open.from ${open.from} beyond the durable text it read (${durableText.length} units)`);
  }
  let cursor = open.from;
  let text = '';
  let end;
  let lastDurable = -1;
  const durables = [];
  for (const f of data.slice(1)) {
    const j = f.json;
    assert.ok(j, `${label}: non-JSON data ${f.data}`);
    assert.equal(end, undefined, `${label}: frame after end: ${f.data}`);
    switch (j.type) {
      case 'chunk':
        assert.equal(f.id, String(j.seq), `${label}: chunk carries id: <seq>`);
        assert.equal(j.from, cursor, `${label}: chunk from ${j.from} but the previous one ended at ${cursor} (gap or overlap)`);
        assert.equal(j.text.length, j.seq - j.from, `${label}: chunk [${j.from},${j.seq}) has ${j.text.length} UTF-16 units`);
        assert.ok(j.seq > j.from, `${label}: empty chunk ${f.data}`);
        cursor = j.seq;
        text += j.text;
        break;
      case 'durable':
        assert.equal(f.id, undefined, `${label}: durable has no id`);
        assert.ok(j.seq <= cursor, `${label}: durable ${j.seq} claims more than delivered (${cursor})`);
        assert.ok(j.seq >= lastDurable, `${label}: durable went backwards ${lastDurable} → ${j.seq}`);
        lastDurable = j.seq;
        durables.push(j.seq);
        break;
      case 'end':
        assert.equal(f.id, undefined, `${label}: end has no id`);
        assert.ok(j.seq <= cursor, `${label}: end.seq ${j.seq} beyond delivered ${cursor}`);
        end = j;
        break;
      default:
        assert.fail(`${label}: unexpected frame ${f.data}`);
    }
  }
  if (requireEnd) assert.ok(end, `${label}: no end frame; frames: ${data.length}`);
  if (produced !== undefined) {
    const spliced = durableText.slice(0, open.from) + text;
    if (requireEnd) assert.equal(spliced.length, produced.length, `${label}: spliced ${spliced.length} units, produced ${produced.length}`);
    assertPrefix(spliced, produced, `${label}: splice${requireEnd ? '' : ' so far'}`);
  }
  return { open, text, end, durables, cursor };
}

// ---------------------------------------------------------------------------------------
// A cutting HTTP proxy (node:http): drops a reader's connection for real, at a planned place
// on the wire, whatever the clocks of the producer and the reader do.

/**
 * A seeded plan of `cuts` cuts of a reader's SSE answers, for a reader sent at least `budget`
 * events (lines with `data:`) before the producer ends. Cut i falls on the i-th connection
 * that reaches it: after its `afterEvent`-th event (1 or more, so every connection delivers
 * something and the reader's resume position moves on), and with probability `midEvent`
 * `intoNext` bytes further, inside the next block (else 0: right at the event's end). The
 * `afterEvent`s add up to at most `budget`, so every cut is reached while the producer is held.
 */
export function planCuts(r, { cuts, budget, midEvent = 0.5 }) {
  const most = Math.floor(budget / cuts);
  assert.ok(most >= 1, `a budget of ${budget} events cannot hold ${cuts} cuts`);
  return Array.from({ length: cuts }, () => ({ afterEvent: r.int(1, most), intoNext: r.chance(midEvent) ? r.int(1, 64) : 0 }));
}

/**
 * Follows one SSE answer's bytes: how many events (blocks with a `data:` line; `retry:` and
 * `: ping` blocks do not count) it has carried, the `id:` of the last one, and the bytes since
 * it. `find(bytes, cut)` returns where in `bytes` the planned `cut` falls (the number of bytes
 * to forward before it), or -1 when it falls beyond them (their events are then counted).
 */
function sseWire() {
  const wire = { events: 0, lastId: undefined, sinceEvent: 0, ids: new Set() };
  let line = '';
  let data = false;
  let id;
  wire.find = (bytes, cut) => {
    for (let i = 0; i < bytes.length; i++) {
      const b = bytes[i];
      const due = cut && wire.events === cut.afterEvent && cut.intoNext > 0;
      // Inside the block after the planned event: cut `intoNext` bytes in, or before the block's
      // last byte if it is shorter, so the client never gets that block whole.
      if (due && b === 0x0a && line === '' && wire.sinceEvent > 0) return i;
      wire.sinceEvent += 1;
      if (due && wire.sinceEvent === cut.intoNext) return i + 1;
      if (b === 0x0d) continue; // the Worker ends lines with \n; a \r changes nothing here
      if (b !== 0x0a) {
        if (line.length < 80) line += String.fromCharCode(b);
        continue;
      }
      if (line === '') {
        if (data) {
          wire.events += 1;
          wire.lastId = id ?? wire.lastId;
          if (id !== undefined) wire.ids.add(id);
          wire.sinceEvent = 0;
          if (cut && wire.events === cut.afterEvent && cut.intoNext === 0) return i + 1;
        }
        data = false;
        id = undefined;
      } else if (line === 'data' || line.startsWith('data:')) data = true;
      else if (line.startsWith('id:')) id = line.slice(3).replace(/^ /, '');
      line = '';
    }
    return -1;
  };
  return wire;
}

/**
 * Forwards every request to `target` (http://host:port), streaming both ways, and records each
 * one's method, url and headers in `requests`. `cuts` (from planCuts, or `plan(cuts)` later)
 * cut the SSE answers (`text/event-stream`) it forwards: each cut forwards exactly the bytes up
 * to its place, then destroys the client's socket and the upstream request. `cuts` counts the
 * planned cuts made so far; `cutLog` has one { url, afterEvent, intoNext, events, lastId } per
 * cut (`lastId`: the `id:` of the last event the client got whole on that connection;
 * `sentWhole(id)`: whether it got that one whole).
 */
export async function startProxy(target, { cuts = [], match } = {}) {
  const requests = [];
  const live = new Set();
  let plan = [];
  let made = 0;
  const cutLog = [];
  let allCut;
  /** The answers planned cuts may fall on (`plan(cuts, { match })`): a RegExp on the request's url. */
  let cutsMatch = match;
  /** Until when requests matching `refusing.match` are refused (their connection dropped at once). */
  let refusing = { until: 0, match: null, refused: 0 };
  const drop = (entry) => {
    entry.req.socket.destroy();
    entry.up.destroy();
    live.delete(entry);
  };
  const server = http.createServer((req, res) => {
    requests.push({ method: req.method, url: req.url, headers: { ...req.headers }, at: Date.now() });
    if (Date.now() < refusing.until && refusing.match.test(req.url)) {
      refusing.refused += 1;
      req.socket.destroy();
      return;
    }
    const entry = { req, res, up: null, cutting: false, ending: false };
    entry.up = http.request(new URL(req.url, target), { method: req.method, headers: { ...req.headers, host: new URL(target).host } }, (upRes) => {
      res.writeHead(upRes.statusCode, upRes.headers);
      res.flushHeaders();
      const sse = /^text\/event-stream/.test(upRes.headers['content-type'] ?? '');
      const wire = sse && (!cutsMatch || cutsMatch.test(req.url)) ? sseWire() : null;
      entry.wire = wire;
      // Settles once the last bytes forwarded were handed to the kernel.
      let flushed = Promise.resolve();
      const forward = (bytes) => {
        flushed = new Promise((resolve) => res.write(bytes, resolve));
      };
      upRes.on('data', (bytes) => {
        if (entry.cutting) return;
        const cut = wire && made < plan.length ? plan[made] : undefined;
        const at = cut ? wire.find(bytes, cut) : -1;
        if (at < 0) {
          if (wire && !cut) wire.find(bytes); // keep counting
          forward(bytes);
          return;
        }
        entry.cutting = true;
        made += 1;
        // `sentWhole(id)`: whether that connection carried the event with this id whole (not
        // enumerable: the record stays plain data for deepEqual and JSON).
        const record = { url: req.url, ...cut, events: wire.events, lastId: wire.lastId };
        Object.defineProperty(record, 'sentWhole', { value: (id) => wire.ids.has(String(id)) });
        cutLog.push(record);
        if (made === plan.length) allCut.resolve();
        if (at > 0) forward(bytes.subarray(0, at));
        // Destroying the socket drops what it has not written yet: the client gets every byte
        // before the cut, then its connection dies.
        flushed.then(() => drop(entry));
      });
      upRes.on('end', () => {
        if (!entry.cutting) res.end();
      });
      upRes.on('error', () => entry.ending || res.destroy());
    });
    live.add(entry);
    res.on('close', () => {
      live.delete(entry);
      entry.up.destroy();
    });
    entry.up.on('error', () => entry.ending || res.destroy());
    req.pipe(entry.up);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  const proxy = {
    url: `http://127.0.0.1:${port}`,
    requests,
    cutLog,
    /** How many planned cuts were made. */
    get cuts() {
      return made;
    },
    /**
     * Plans `cuts` (from planCuts) from here on, on the SSE answers whose request url `match`es
     * (a RegExp; default: every SSE answer); resolves once all of them were made: what a held
     * producer waits for. The match applies to answers that start from here on.
     */
    plan(more, { match: only } = {}) {
      cutsMatch = only ?? cutsMatch;
      plan = [...plan.slice(0, made), ...more];
      let resolve;
      allCut = { promise: new Promise((r) => (resolve = r)), resolve };
      if (made === plan.length) resolve();
      return allCut.promise;
    },
    /** The open SSE answers whose url matches `match`, and the events each has carried so far. */
    liveEvents(match) {
      return [...live].filter((e) => e.wire && match.test(e.req.url)).map((e) => ({ url: e.req.url, events: e.wire.events }));
    },
    /** Resolves once every planned cut was made. */
    get allCut() {
      return allCut.promise;
    },
    /**
     * Ends every open answer whose url matches `match` now, cleanly and short (what the client
     * got is all it gets: an SSE stream without its ending), and refuses (drops at once) every
     * request matching it for `ms`: a server that went away and comes back. Resolves with how
     * many requests were refused, once the window is over (the window is the fault's length).
     */
    async outage(match, ms) {
      refusing = { until: Date.now() + ms, match, refused: 0 };
      for (const entry of [...live]) {
        if (!match.test(entry.req.url)) continue;
        entry.cutting = true;
        entry.ending = true;
        entry.res.end();
        entry.up.destroy();
        live.delete(entry);
      }
      await new Promise((r) => setTimeout(r, ms));
      return refusing.refused;
    },
    async close() {
      for (const entry of [...live]) drop(entry);
      server.closeAllConnections?.();
      await new Promise((r) => server.close(r));
    },
  };
  proxy.plan(cuts);
  return proxy;
}

/**
 * A hold for a producer that runs elsewhere (the example chat's model, in the Worker: its
 * MOCK_HOLD_URL): a local server whose `GET /<key>` is answered only once the test calls
 * `release(key)`. `held(key)` resolves once the producer waits there. So a test acts
 * mid-answer on the answer's state, never on the producer's clock.
 */
export async function startHold() {
  const keys = new Map(); // key → { arrived, reached(), released, res }
  const entry = (key) => {
    if (!keys.has(key)) {
      let reached;
      const arrived = new Promise((resolve) => (reached = resolve));
      keys.set(key, { arrived, reached, released: false, res: null });
    }
    return keys.get(key);
  };
  const server = http.createServer((req, res) => {
    const e = entry(decodeURIComponent(new URL(req.url, 'http://hold.invalid').pathname.slice(1)));
    e.res = res;
    e.reached();
    if (e.released) res.end('released');
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    /** Resolves once the producer of `key` waits at the hold. */
    held: (key) => entry(key).arrived,
    /** Lets the producer of `key` go on (now, or as soon as it arrives). */
    release(key) {
      const e = entry(key);
      e.released = true;
      e.res?.end('released');
    },
    async close() {
      server.closeAllConnections?.();
      await new Promise((r) => server.close(r));
    },
  };
}

/**
 * A POST whose body stays open until `end()`, sent with node:http. Node's `fetch` (undici)
 * holds a response body back until its own request body has been sent, so it cannot observe
 * an early answer; node:http delivers the answer as soon as the server sends it.
 */
export function openPost(url, headers = {}) {
  const req = http.request(url, { method: 'POST', headers: { 'transfer-encoding': 'chunked', ...headers } });
  req.flushHeaders(); // the request leaves now, before its first piece (node:http waits for one)
  const answer = new Promise((resolve, reject) => {
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
  answer.catch(() => {});
  return {
    answer,
    send: (chunk) => new Promise((r) => req.write(chunk, r)),
    end: () => { if (!req.writableEnded) req.end(); },
    destroy: () => req.destroy(),
  };
}

/** Percentile of a sorted numeric array (nearest rank). */
export function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

/**
 * A reader of a chat's feed (`url`: `GET …/chats/{chat}/events?token=…`), as a tab follows it:
 * resolves once its replay's `ready` came. `events` are its data frames so far (`ready` left out)
 * as `{ id, type, …json }`; `next(type)` the next data frame of that type after those taken.
 */
export async function followFeed(url, { lastEventId } = {}) {
  const sse = await readSse(url, { headers: lastEventId === undefined ? {} : { 'last-event-id': lastEventId } });
  assert.equal(sse.status, 200, `feed ${url}: ${sse.status}`);
  await sse.next((f) => f.json?.type === 'ready');
  return {
    sse,
    get events() {
      return sse.frames.filter((f) => f.json && f.json.type !== 'ready').map((f) => ({ id: f.id, ...f.json }));
    },
    next: (type, ms = 15_000) => sse.next((f) => f.json?.type === type, ms).then((f) => ({ id: f.id, ...f.json })),
    close: () => sse.close(),
  };
}
