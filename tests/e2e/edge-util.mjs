// Helpers for the edge-case e2e files (eviction, faults, bad-input, load) and bench/load.mjs,
// on top of the shared ones in util.mjs (randomness, text, `call`), which are re-exported.
//
//   rawRequest   one HTTP request on its own connection, the path sent byte for byte
//   client       a small API client for one stream (producer calls: Bearer; reader calls: ?token=)
//   d1Snapshot   every row of the message and chunk tables, for "nothing was written" checks
//   durableFromDb  the durable text assembled straight from D1 (body + chunk rows), like /text
//   splitUnits   cuts text (util.mjs's emojiText) without splitting surrogate pairs
//   checkSplice  contract S for one reader: durableText(from) ++ delivered == produced
import assert from 'node:assert/strict';
import http from 'node:http';

import { jsonOrUndefined } from './harness.mjs';
import { call, emojiText, insidePair, rng, seedFromEnv, sleep, splitCodePoints } from './util.mjs';

export { call, emojiText, insidePair, rng, seedFromEnv, sleep };
/** Cuts text into pieces of min..max UTF-16 units, never inside a surrogate pair. */
export const splitUnits = splitCodePoints;

// ---------------------------------------------------------------------------------------
// Text

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
// Streams, rows and D1

let counter = 0;
/** A fresh, unique, valid stream id (letters, digits, - and :). */
export function uniqueId(prefix = 's') {
  return `${prefix}-${process.pid}-${++counter}-${Math.random().toString(36).slice(2, 8)}`;
}

/** Inserts the message row (what the app does before opening) and returns the id. */
export function insertRow(stack, id) {
  stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES (?, 'c1', 'assistant')`, id);
  return id;
}

export function newStreamId(stack, prefix = 's') {
  return insertRow(stack, uniqueId(prefix));
}

/** Every row of both tables, in a stable order. */
export function d1Snapshot(db) {
  return {
    messages: db.all(`SELECT * FROM messages ORDER BY id`),
    chunks: db.all(`SELECT * FROM message_chunks ORDER BY streamId, seq, id`),
  };
}

/**
 * The durable text straight from D1: the row's body followed by its chunk rows in seq order,
 * taking only the contiguous prefix (what SPEC §5 calls the durable text). `null` without a row.
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
// HTTP

/**
 * One request on its own connection (`Connection: close`, no agent), the path sent exactly as
 * given (no URL normalisation by the client). Resolves { status, headers, raw, json, error }.
 * `readLimit` stops reading after that many bytes (for SSE answers).
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

/** An API client for one stream. */
export function client(stack, id, token = stack.token(id)) {
  const base = `${stack.baseUrl}/streams/${id}`;
  const auth = { authorization: `Bearer ${token}` };
  const post = (action, body, headers = {}) => call(`${base}/${action}`, { method: 'POST', headers: { ...auth, ...headers }, body });
  return {
    id,
    token,
    base,
    open: () => post('open'),
    append: (text) => post('append', text, { 'content-type': 'text/plain; charset=utf-8' }),
    flush: () => post('flush'),
    close: () => post('close'),
    fail: (error) => post('fail', JSON.stringify({ error }), { 'content-type': 'application/json' }),
    cancel: () => post('cancel'),
    stats: () => call(`${base}/stats`, { headers: auth }),
    text: () => call(`${base}/text?token=${encodeURIComponent(token)}`),
    eventsUrl: (from) => `${base}/events?${from === undefined ? '' : `from=${from}&`}token=${encodeURIComponent(token)}`,
  };
}

/** Assert a 200 and return its JSON. */
export function ok(res, what) {
  assert.equal(res.status, 200, `${what}: ${res.status} ${res.raw ?? res.error}`);
  return res.json;
}

// ---------------------------------------------------------------------------------------
// Contract S for one reader

/**
 * Checks one reader's data frames (SPEC §3) and contract S:
 *   durableText.slice(0, open.from) ++ concat(chunks) == produced
 * `durableText` is what the reader had read from /text before joining (a prefix of produced
 * that covers the join offset), `asked` the offset it asked for. Returns { open, end, text }.
 * Requires the reader to have seen `end` unless `requireEnd` is false.
 */
export function checkSplice(frames, { produced, durableText = produced, asked, label = 'reader', requireEnd = true }) {
  const data = frames.filter((f) => f.data !== undefined);
  assert.ok(data.length > 0, `${label}: no frames`);
  const open = data[0].json;
  assert.equal(open?.type, 'open', `${label}: first frame ${data[0].data}`);
  assert.equal(data[0].id, String(open.from), `${label}: open carries id: <from>`);
  if (asked !== undefined) {
    const want = Math.min(asked, open.seq);
    const expected = insidePair(produced, want) ? want - 1 : want;
    assert.equal(open.from, expected, `${label}: asked from ${asked} (seq ${open.seq}), open.from ${open.from}`);
  }
  assert.ok(open.from <= durableText.length, `${label}: open.from ${open.from} beyond the durable text it read (${durableText.length} units)`);
  let cursor = open.from;
  let text = '';
  let end;
  let lastDurable = -1;
  for (const f of data.slice(1)) {
    const j = f.json;
    assert.ok(j, `${label}: non-JSON data ${f.data}`);
    assert.equal(end, undefined, `${label}: frame after end: ${f.data}`);
    if (j.type === 'chunk') {
      assert.equal(f.id, String(j.seq), `${label}: chunk carries id: <seq>`);
      assert.equal(j.from, cursor, `${label}: chunk from ${j.from}, previous ended at ${cursor} (gap or overlap)`);
      assert.equal(j.text.length, j.seq - j.from, `${label}: chunk [${j.from},${j.seq}) has ${j.text.length} UTF-16 units`);
      cursor = j.seq;
      text += j.text;
    } else if (j.type === 'durable') {
      assert.equal(f.id, undefined, `${label}: durable carries no id`);
      assert.ok(j.seq <= cursor, `${label}: durable ${j.seq} beyond delivered ${cursor}`);
      assert.ok(j.seq >= lastDurable, `${label}: durable went backwards ${lastDurable} → ${j.seq}`);
      lastDurable = j.seq;
    } else if (j.type === 'end') {
      assert.equal(f.id, undefined, `${label}: end carries no id`);
      assert.ok(j.seq <= cursor, `${label}: end.seq ${j.seq} beyond delivered ${cursor}`);
      end = j;
    } else {
      assert.fail(`${label}: unexpected frame ${f.data}`);
    }
  }
  if (requireEnd) assert.ok(end, `${label}: no end frame; frames: ${data.length}`);
  const spliced = durableText.slice(0, open.from) + text;
  if (requireEnd) {
    assert.equal(spliced.length, produced.length, `${label}: spliced ${spliced.length} units, produced ${produced.length}`);
    assertPrefix(spliced, produced, `${label}: splice`);
  } else {
    assertPrefix(spliced, produced, `${label}: splice so far`);
  }
  return { open, end, text, cursor };
}

/** Percentile of a sorted numeric array (nearest rank). */
export function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}
