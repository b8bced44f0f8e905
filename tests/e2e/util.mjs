// Helpers for the e2e tests (tests/e2e/*.test.mjs): a small API client over fetch, unique
// stream ids with their message rows, a seeded generator of emoji-heavy text, a strict
// checker of a reader's frames (contract S bookkeeping), and a cuttable HTTP proxy.
// Everything here talks to the real Worker started by harness.mjs; nothing is mocked.
import assert from 'node:assert/strict';
import http from 'node:http';
import { jsonOrUndefined, readSse, sseParser } from './harness.mjs';

/**
 * Marks a test that fails because of a known WORKER bug (listed in the e2e report): it runs
 * and reports, but does not fail the suite. E2E_STRICT=1 turns every such todo into a plain
 * test, to check whether the bug is still there.
 */
export const workerBug = (reason) => (process.env.E2E_STRICT ? undefined : `WORKER BUG: ${reason}`);

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

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
// Streams and the API

let idCounter = 0;

/** A fresh stream id with its message row inserted (the app inserts it before `open`). */
export function newStream(stack, prefix = 's') {
  const id = `${prefix}-${++idCounter}-${Math.random().toString(36).slice(2, 8)}`;
  stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES (?, 'c1', 'assistant')`, id);
  return id;
}

/** The message row and chunk rows of a stream, straight from the local D1 file. */
export function rows(stack, id) {
  return {
    row: stack.db.get(`SELECT * FROM messages WHERE id = ?`, id),
    chunks: stack.db.all(`SELECT * FROM message_chunks WHERE streamId = ? ORDER BY seq`, id),
  };
}

/** { status, headers, raw, json } of a fetch. */
export async function call(url, init = {}) {
  const res = await fetch(url, init);
  const raw = await res.text();
  return { status: res.status, headers: res.headers, raw, json: jsonOrUndefined(raw) };
}

/** An API client for one stream. Producer calls send `Authorization: Bearer`; reader calls `?token=`. */
export function api(stack, id, { token = stack.token(id) } = {}) {
  const url = (action, query = '') => `${stack.baseUrl}/streams/${encodeURIComponent(id)}/${action}${query}`;
  const auth = { authorization: `Bearer ${token}` };
  const post = (action, body, headers = {}) => call(url(action), { method: 'POST', headers: { ...auth, ...headers }, body });
  const readToken = () => encodeURIComponent(token);
  return {
    id,
    url,
    token,
    open: (meta) => post('open', meta === undefined ? undefined : JSON.stringify({ meta }), meta === undefined ? {} : { 'content-type': 'application/json' }),
    append: (text) => post('append', text, { 'content-type': 'text/plain; charset=utf-8' }),
    appendBytes: (bytes) => post('append', bytes, { 'content-type': 'text/plain; charset=utf-8' }),
    flush: () => post('flush'),
    close: () => post('close'),
    fail: (error) => post('fail', JSON.stringify({ error }), { 'content-type': 'application/json' }),
    cancel: () => post('cancel'),
    stats: () => call(url('stats'), { headers: auth }),
    text: () => call(url('text', `?token=${readToken()}`)),
    eventsUrl: (from) => url('events', `?${from === undefined ? '' : `from=${from}&`}token=${readToken()}`),
    events: (from, opts) => readSse(url('events', `?${from === undefined ? '' : `from=${from}&`}token=${readToken()}`), opts),
  };
}

/** Assert a 200 answer and return its JSON. */
export function ok(res, what = 'request') {
  assert.equal(res.status, 200, `${what}: ${res.status} ${res.raw}`);
  return res.json;
}

/** Assert a JSON error answer with `status` and `code`; returns its JSON. */
export function isError(res, status, code, what = 'request') {
  assert.equal(res.status, status, `${what}: expected ${status} ${code}, got ${res.status} ${res.raw}`);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/, `${what}: content-type`);
  assert.equal(res.json?.error, code, `${what}: ${res.raw}`);
  assert.equal(typeof res.json.message, 'string', `${what}: message`);
  assert.ok(res.json.message.length > 0, `${what}: empty message`);
  return res.json;
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
 * Checks a reader's data frames against SPEC §3 and returns what it learned:
 *   open   the open frame;  text  the concatenated chunk texts (covering [open.from, end));
 *   end    the end frame (or undefined);  durables  the durable seqs in order.
 * Asserts: open first with `id: <from>`; every chunk has `id: <seq>`, `text.length == seq - from`
 * and starts where the previous one ended; durable/end carry no id and never claim more than
 * was delivered; durable seqs never go backwards; nothing follows `end`.
 */
export function checkFrames(frames, label = 'reader') {
  const data = frames.filter((f) => f.data !== undefined);
  assert.ok(data.length > 0, `${label}: no frames`);
  const open = data[0].json;
  assert.equal(open?.type, 'open', `${label}: first frame ${data[0].data}`);
  assert.equal(data[0].id, String(open.from), `${label}: open carries id: <from>`);
  assert.ok(open.from <= open.seq, `${label}: open.from ${open.from} > open.seq ${open.seq}`);
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
  return { open, text, end, durables, cursor };
}

// ---------------------------------------------------------------------------------------
// A cuttable HTTP proxy (node:http), to drop a client's connection for real.

/**
 * Forwards every request to `target` (http://host:port), streaming both ways. Records each
 * request's url and headers in `requests`. `cut()` destroys every open client socket (and
 * its upstream request) mid-response: the client sees its connection die.
 */
export async function startProxy(target) {
  const requests = [];
  const live = new Set();
  const server = http.createServer((req, res) => {
    requests.push({ method: req.method, url: req.url, headers: { ...req.headers }, at: Date.now() });
    const up = http.request(new URL(req.url, target), { method: req.method, headers: { ...req.headers, host: new URL(target).host } }, (upRes) => {
      res.writeHead(upRes.statusCode, upRes.headers);
      res.flushHeaders();
      upRes.on('data', (c) => res.write(c));
      upRes.on('end', () => res.end());
      upRes.on('error', () => res.destroy());
    });
    const entry = { req, res, up };
    live.add(entry);
    const forget = () => live.delete(entry);
    res.on('close', () => {
      forget();
      up.destroy();
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    get open() {
      return live.size;
    },
    cut() {
      const n = live.size;
      for (const { req, up } of live) {
        req.socket.destroy();
        up.destroy();
      }
      live.clear();
      return n;
    },
    async close() {
      this.cut();
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
  const answer = new Promise((resolve, reject) => {
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode, text }));
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
