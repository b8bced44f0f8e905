// Bad input, one test per case (SPEC §3, §4, §9): hostile stream ids, odd join offsets, oversized
// and malformed bodies, malformed NDJSON for a `ui` stream, wrong methods, every kind of bad
// token, huge headers. For every case:
//   * the status is the expected 4xx (or, for join offsets, the SPEC'd SSE success), never 5xx;
//   * an error body is JSON {error, message} (a 403 is byte-identical to every other denial);
//   * NOTHING was written to D1: both tables are snapshotted before and after each case (after
//     waiting out a checkpoint interval, so text pushed by mistake would have been committed),
//     and the live streams' seq/durableSeq/state are unchanged (a refused NDJSON line leaves
//     nothing behind, not even in the unfinished line a later append would complete).
// Requests go out one per connection with the path sent byte for byte (no client-side URL
// normalisation).
import test from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { mintToken, startStack, TEST_SECRET } from './harness.mjs';
import { api, d1Snapshot, insertRow, insidePair, ok, openPost, parseSse, rawRequest, uniqueId } from './util.mjs';

const MAX_APPEND_BYTES = 1_048_576; // the default (wrangler.toml)
const INTERVAL_MS = 50; // CHECKPOINT_INTERVAL_MS of this stack
/** The live stream's text: astral characters at known offsets (a pair starts at 2 and at 9). */
const TEXT = 'ab😀cd é 🦀 «x» 漢字\n"q" \\ </script> 👍🏽 end';
/** The `ui` stream's text: two complete NDJSON lines. */
const UI_TEXT = `${JSON.stringify({ type: 'start', messageId: 'm' })}\n${JSON.stringify({ type: 'text-delta', id: 't', delta: '😀 日本 👍🏽' })}\n`;

let stack;
let LIVE; // open, TEXT appended and flushed (durableSeq == seq, so no background writes)
let UI_LIVE; // a `ui` stream, UI_TEXT appended and flushed
let PENDING; // row inserted, never opened
let denialBody; // the body of a 403, to compare every denial with
const results = { cases: 0 };

test.before(async () => {
  stack = await startStack({ name: 'e2e-bad-input', vars: { CHECKPOINT_INTERVAL_MS: String(INTERVAL_MS) } });
  LIVE = insertRow(stack, uniqueId('bad-live'));
  PENDING = insertRow(stack, uniqueId('bad-pending'));
  const c = api(stack, LIVE);
  ok(await c.open(), 'open LIVE');
  ok(await c.append(TEXT), 'append LIVE');
  const f = ok(await c.flush(), 'flush LIVE');
  assert.equal(f.durableSeq, TEXT.length);
  UI_LIVE = insertRow(stack, uniqueId('bad-ui'));
  const u = api(stack, UI_LIVE);
  ok(await u.open(undefined, 'ui'), 'open UI_LIVE');
  ok(await u.append(UI_TEXT), 'append UI_LIVE');
  assert.equal(ok(await u.flush(), 'flush UI_LIVE').durableSeq, UI_TEXT.length);
  const d = await rawRequest(stack.baseUrl, { path: `/streams/${uniqueId('nobody')}/text` });
  assert.equal(d.status, 403);
  denialBody = d.raw;
});
test.after(async () => {
  await stack?.stop();
});

// ---------------------------------------------------------------------------------------
// Tokens

const now = () => Math.floor(Date.now() / 1000);
const b64 = (v) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');
/** A token really signed with HMAC-SHA512 (a valid HS512 JWT with the right key). */
function hs512(stream) {
  const head = b64({ alg: 'HS512', typ: 'JWT' });
  const body = b64({ sub: 'x', stream, scope: 'read write cancel', exp: now() + 600 });
  return `${head}.${body}.${createHmac('sha512', TEST_SECRET).update(`${head}.${body}`).digest('base64url')}`;
}
const tok = (stream, scope = 'read write cancel', extra = {}) => mintToken({ stream, scope, ...extra });
const bearer = (t) => ({ authorization: `Bearer ${t}` });

// ---------------------------------------------------------------------------------------
// Requests and checks

const req = (opts) => rawRequest(stack.baseUrl, opts);
const post = (path, { headers = {}, body } = {}) => req({ method: 'POST', path, headers, body });
const liveTok = () => tok(LIVE);

function expectError(status, code) {
  return (res) => {
    assert.equal(res.status, status, `expected ${status} ${code}, got ${res.status} ${res.raw ?? res.error}`);
    assert.match(String(res.headers['content-type']), /^application\/json/, `content-type of ${res.raw}`);
    assert.ok(res.json && typeof res.json === 'object', `not JSON: ${res.raw}`);
    const codes = [code].flat();
    assert.ok(codes.includes(res.json.error), `error ${res.json.error}, expected ${codes.join(' or ')}: ${res.raw}`);
    assert.equal(typeof res.json.message, 'string', `message: ${res.raw}`);
    assert.ok(res.json.message.length > 0, 'empty message');
    if (status === 403) assert.equal(res.raw, denialBody, 'every denial is the same answer');
    if (status === 405) assert.ok(res.headers.allow, '405 carries an Allow header');
  };
}

/** The data frames, the `retry:` value and the refused lines of an SSE answer (util.mjs's parser). */
function sseAnswer(text) {
  const records = parseSse(text);
  return {
    frames: records.filter((r) => r.data !== undefined),
    retry: records.find((r) => r.retry !== undefined)?.retry,
    invalid: records.filter((r) => r.invalid !== undefined),
  };
}

/** Reads a subscription of LIVE until its replay is complete (open, chunk if any, durable if any). */
function subscribe({ query = '', headers = {} }) {
  return req({
    path: `/streams/${LIVE}/events?${query}${query ? '&' : ''}token=${encodeURIComponent(tok(LIVE, 'read'))}`,
    headers,
    until: (text) => {
      const { frames } = sseAnswer(text.slice(0, text.lastIndexOf('\n\n') + 2));
      const open = frames[0]?.json;
      if (!open || open.type !== 'open') return frames.length > 0;
      const needChunk = open.from < open.seq;
      const needDurable = open.durableSeq > open.from;
      return frames.length >= 1 + needChunk + needDurable;
    },
  });
}

/** The subscription is the normal SSE answer, starting exactly at `from`. */
function expectSubscription(from) {
  return (res) => {
    assert.equal(res.status, 200, `expected an SSE subscription, got ${res.status} ${res.raw ?? res.error}`);
    assert.equal(res.headers['content-type'], 'text/event-stream; charset=utf-8');
    assert.equal(res.headers['cache-control'], 'no-cache, no-transform');
    assert.equal(res.headers['x-accel-buffering'], 'no');
    const { frames, retry, invalid } = sseAnswer(res.raw);
    assert.ok(Number.isFinite(retry), 'the answer starts with a retry: line');
    assert.deepEqual(invalid, [], 'every SSE line is well-formed');
    const open = frames[0]?.json;
    assert.equal(open?.type, 'open', `first frame ${frames[0]?.data}`);
    assert.deepEqual(open, { type: 'open', streamId: LIVE, from, seq: TEXT.length, durableSeq: TEXT.length, ended: false });
    assert.equal(frames[0].id, String(from), 'open carries id: <from>');
    const rest = frames.slice(1);
    if (from < TEXT.length) {
      assert.deepEqual(rest[0]?.json, { type: 'chunk', from, seq: TEXT.length, text: TEXT.slice(from) }, 'replayed chunk');
      assert.equal(rest[0].id, String(TEXT.length), 'chunk carries id: <seq>');
      assert.deepEqual(rest[1]?.json, { type: 'durable', seq: TEXT.length }, 'durable frame');
    } else {
      assert.equal(rest.length, 0, `nothing to replay beyond the end: ${JSON.stringify(rest)}`);
    }
  };
}

async function liveState() {
  const state = {};
  for (const id of [LIVE, UI_LIVE]) {
    const s = await req({ path: `/streams/${id}/stats`, headers: bearer(tok(id)) });
    assert.equal(s.status, 200, `stats of ${id}: ${s.status} ${s.raw}`);
    state[id] = { state: s.json.state, seq: s.json.seq, durableSeq: s.json.durableSeq };
  }
  return state;
}

// ---------------------------------------------------------------------------------------
// The cases

const enc = encodeURIComponent;
const star = () => bearer(tok('*'));
const cases = [];
const add = (name, run, expect, opts = {}) => cases.push({ name, run, expect, ...opts });

// Stream ids (POST open with a token valid for every stream, so only the id is wrong).
for (const [name, id, status, code] of [
  ['empty id', '', 400, 'bad_stream_id'],
  ['id of 129 characters', 'a'.repeat(129), 400, 'bad_stream_id'],
  ['id of 20,000 characters', 'b'.repeat(20_000), 400, 'bad_stream_id'],
  ['id with a slash', 'a/b', 400, 'bad_stream_id'],
  ['id ".." (resolved away: outside the prefix)', '..', 404, 'not_found'],
  ['id "%2E%2E" (an encoded dot-segment)', '%2E%2E', 404, 'not_found'],
  ['id with ".." inside', 'a..b', 400, 'bad_stream_id'],
  ['id starting with "."', '.hidden', 400, 'bad_stream_id'],
  ['id with %00', 'a%00b', 400, 'bad_stream_id'],
  ['id with %2F', 'a%2Fb', 400, 'bad_stream_id'],
  ['id "..%2F..%2Fetc"', '..%2F..%2Fetc', 400, 'bad_stream_id'],
  ['id with CRLF (%0D%0A)', 'a%0D%0Ab', 400, 'bad_stream_id'],
  ['id with a space (%20)', 'a%20b', 400, 'bad_stream_id'],
  ['id with a double quote', 'a"b', 400, 'bad_stream_id'],
  ['id with a single quote and SQL', "x';DROP--", 400, 'bad_stream_id'],
  ["id `'; DROP TABLE messages;--` (encoded)", enc("'; DROP TABLE messages;--"), 400, 'bad_stream_id'],
  ['id with a non-ASCII character', enc('é'), 400, 'bad_stream_id'],
]) {
  add(`stream id: ${name} → ${status}`, () => post(`/streams/${id}/open`, { headers: star() }), expectError(status, code));
}
add(
  'stream id: "a/../<fresh>" resolves to another id, whose missing row refuses the open → 409',
  () => post(`/streams/a/../${uniqueId('fresh')}/open`, { headers: star() }),
  expectError(409, 'open_refused'),
);
add('stream id: SQL in an events id → 400', () => req({ path: `/streams/${enc("' OR 1=1--")}/events?token=${tok('*')}` }), expectError(400, 'bad_stream_id'));
add('stream id: %00 in a text id → 400', () => req({ path: `/streams/a%00/text?token=${tok('*', 'read')}` }), expectError(400, 'bad_stream_id'));
add('unknown action → 404', () => post(`/streams/${LIVE}/explode`, { headers: bearer(liveTok()) }), expectError(404, 'not_found'));
add('no action → 404', () => post(`/streams/${LIVE}`, { headers: bearer(liveTok()) }), expectError(404, 'not_found'));

// Join offsets: SPEC §3, a missing, negative or non-numeric value means 0; beyond the end is
// clamped to the end; inside a surrogate pair moves down to the pair's start.
const seq = TEXT.length;
for (const [name, query, headers, from] of [
  ['from=-1', 'from=-1', {}, 0],
  ['from=-9999999999', 'from=-9999999999', {}, 0],
  ['from=3.5 (fractional)', 'from=3.5', {}, 0],
  ['from=NaN', 'from=NaN', {}, 0],
  ['from=1e309', 'from=1e309', {}, 0],
  ['from=abc', 'from=abc', {}, 0],
  ['from= (empty)', 'from=', {}, 0],
  ['from=%00', 'from=%00', {}, 0],
  ['from beyond the end', `from=${seq + 1000}`, {}, seq],
  ['from=2^53-1 (huge, still an integer)', 'from=9007199254740991', {}, seq],
  ['from inside a surrogate pair', 'from=3', {}, 2],
  ['Last-Event-ID: -5', '', { 'last-event-id': '-5' }, 0],
  ['Last-Event-ID: NaN', '', { 'last-event-id': 'NaN' }, 0],
  ['Last-Event-ID: 1e309', '', { 'last-event-id': '1e309' }, 0],
  ['Last-Event-ID: 2.5', '', { 'last-event-id': '2.5' }, 0],
  ['Last-Event-ID beyond the end wins over from=4', 'from=4', { 'last-event-id': String(seq + 50) }, seq],
  ['Last-Event-ID: 4 wins over from=junk', 'from=junk', { 'last-event-id': '4' }, 4],
  ['Last-Event-ID inside a pair wins over from=0', 'from=0', { 'last-event-id': '10' }, 9],
]) {
  assert.ok(from === 0 || from === seq || !insidePair(TEXT, from), `case table: ${name}`);
  add(`join offset: ${name} → SSE from ${from}`, () => subscribe({ query, headers }), expectSubscription(from));
}
// A value beyond any integer: either 0 (not a number) or clamped to the end is acceptable.
for (const [name, query, headers] of [
  ['from=99999999999999999999 (beyond 2^64)', 'from=99999999999999999999', {}],
  ['Last-Event-ID: 99999999999999999999 (beyond 2^64)', '', { 'last-event-id': '99999999999999999999' }],
]) {
  add(`join offset: ${name} → SSE from 0 or the end`, () => subscribe({ query, headers }), (res) => {
    assert.equal(res.status, 200, `${res.status} ${res.raw}`);
    const open = sseAnswer(res.raw).frames[0]?.json;
    assert.ok(open?.from === 0 || open?.from === seq, `open.from ${open?.from}`);
    expectSubscription(open.from)(res);
  });
}

// Append bodies (a valid write token; only the body is wrong).
const appendBytes = (bytes, headers = {}) => post(`/streams/${LIVE}/append`, { headers: { ...bearer(liveTok()), 'content-type': 'text/plain; charset=utf-8', ...headers }, body: bytes });
add(`append: body of MAX_APPEND_BYTES+1 (${MAX_APPEND_BYTES + 1} bytes) → 413`, () => appendBytes(Buffer.alloc(MAX_APPEND_BYTES + 1, 0x61)), expectError(413, 'too_large'));
for (const [name, bytes] of [
  ['0xFF byte', [0x61, 0xff, 0x62]],
  ['truncated 3-byte sequence at the end', [0x61, 0x62, 0xe2, 0x82]],
  ['overlong encoding of "/"', [0xc0, 0xaf]],
  ['UTF-8-encoded surrogate (CESU)', [0xed, 0xa0, 0x80]],
  ['lone continuation byte', [0x80, 0x61]],
  ['code point above U+10FFFF', [0xf4, 0x90, 0x80, 0x80]],
]) {
  add(`append: invalid UTF-8 (${name}) → 400`, () => appendBytes(Buffer.from(bytes)), expectError(400, 'bad_utf8'));
}
add(
  'append: invalid UTF-8 in a streaming body (no content-length) → 400',
  () => appendBytes(Buffer.from([0xff, 0xfe, 0x61]), { 'transfer-encoding': 'chunked' }),
  expectError(400, 'bad_utf8'),
);
add('append: to a stream that was never opened → 404', () => post(`/streams/${PENDING}/append`, { headers: bearer(tok(PENDING)), body: 'x' }), expectError(404, 'not_open'));

// JSON bodies.
const postJson = (path, body, t) => post(path, { headers: { ...bearer(t), 'content-type': 'application/json' }, body });
for (const [name, body] of [
  ['"{" (truncated)', '{'],
  ['an array', '[1,2]'],
  ['a string', '"meta"'],
  ['invalid UTF-8', Buffer.from([0x7b, 0xff, 0x7d])],
  ['trailing garbage', '{"meta":1} x'],
]) {
  add(`open: bad JSON body (${name}) → 400, the row stays pending`, () => postJson(`/streams/${PENDING}/open`, body, tok(PENDING)), expectError(400, 'bad_json'));
}
add('open: a JSON body over 1 MiB → 413, the row stays pending', () => postJson(`/streams/${PENDING}/open`, JSON.stringify({ meta: 'm'.repeat((1 << 20) + 1) }), tok(PENDING)), expectError(413, 'too_large'));
add('open: a stream already open here → 409', () => post(`/streams/${LIVE}/open`, { headers: bearer(liveTok()) }), expectError(409, 'open_refused'));
add('open: no message row → 409', () => post(`/streams/${uniqueId('norow')}/open`, { headers: star() }), expectError(409, 'open_refused'));
for (const [name, body] of [['"{\\"error\\":" (truncated)', '{"error":'], ['not JSON', 'nope'], ['invalid UTF-8', Buffer.from([0x7b, 0xc3, 0x28, 0x7d])]]) {
  add(`fail: bad JSON body (${name}) → 400, the stream stays live`, () => postJson(`/streams/${LIVE}/fail`, body, liveTok()), expectError(400, 'bad_json'));
}
for (const [name, body] of [
  ['"{" (truncated)', '{'],
  ['an empty object (no url)', '{}'],
  ['an ftp url', '{"url":"ftp://example.com/x"}'],
  ['a url with a newline', '{"url":"https://example.com/\\nx"}'],
  ['a header name with CRLF', '{"url":"https://example.com/","headers":{"x\\r\\ny":"1"}}'],
  ['method DELETE', '{"url":"https://example.com/","method":"DELETE"}'],
]) {
  add(`pump: bad body (${name}) → 400`, () => postJson(`/streams/${LIVE}/pump`, body, liveTok()), expectError(400, 'bad_upstream'));
}
add('text: an id without a row → 404', () => req({ path: `/streams/${uniqueId('norow')}/text?token=${tok('*', 'read')}` }), expectError(404, 'no_row'));
add('cancel: an id without a row → 404', () => post(`/streams/${uniqueId('norow')}/cancel`, { headers: star() }), expectError(404, 'no_row'));

// Wrong methods.
for (const [method, action, allow] of [
  ['GET', 'open', 'POST'],
  ['PUT', 'append', 'POST'],
  ['GET', 'flush', 'POST'],
  ['DELETE', 'close', 'POST'],
  ['GET', 'cancel', 'POST'],
  ['PATCH', 'fail', 'POST'],
  ['POST', 'events', 'GET'],
  ['DELETE', 'events', 'GET'],
  ['PUT', 'text', 'GET'],
  ['POST', 'stats', 'GET'],
  ['POST', 'watch', 'GET'],
  ['OPTIONS', 'pump', 'POST'],
]) {
  add(`method: ${method} ${action} → 405 (Allow: ${allow})`, () => req({ method, path: `/streams/${LIVE}/${action}?token=${liveTok()}`, headers: bearer(liveTok()) }), (res) => {
    expectError(405, 'method_not_allowed')(res);
    assert.equal(res.headers.allow, allow);
  });
}

// Bad tokens: each is denied with the same 403, before anything touches the stream.
const appendWith = (headers) => post(`/streams/${LIVE}/append`, { headers: { 'content-type': 'text/plain', ...headers }, body: 'zz' });
for (const [name, headers] of [
  ['missing', () => ({})],
  ['garbage', () => bearer('junk')],
  ['three garbage segments', () => bearer('a.b.c')],
  ['empty bearer', () => ({ authorization: 'Bearer ' })],
  ['Basic scheme', () => ({ authorization: `Basic ${Buffer.from('u:p').toString('base64')}` })],
  ['signed with the wrong key', () => bearer(mintToken({ stream: '*' }, 'another-secret-0123456789abcdef'))],
  ['read scope only', () => bearer(tok(LIVE, 'read'))],
  ['cancel scope only', () => bearer(tok(LIVE, 'cancel'))],
  ['another stream', () => bearer(tok(`${LIVE}x`))],
  ['a shorter exact id', () => bearer(tok(LIVE.slice(0, -1)))],
  ['a prefix claim that does not match', () => bearer(tok('zz-not-this-prefix*'))],
  ['expired', () => bearer(tok(LIVE, 'read write cancel', { exp: now() - 5 }))],
  ['without exp', () => bearer(tok(LIVE, 'read write cancel', { exp: null }))],
  ['alg none', () => bearer(mintToken({ stream: LIVE, alg: 'none' }))],
  ['HS512 (really signed with SHA-512)', () => bearer(hs512(LIVE))],
  ['header says RS256, HMAC-signed', () => bearer(mintToken({ stream: LIVE, alg: 'RS256' }))],
  ['payload tampered after signing', () => bearer(mintToken({ stream: 'other', scope: 'read', tamper: true }))],
  ['30 KB of garbage', () => bearer('x'.repeat(30 * 1024))],
  ['16 KB custom header, no token', () => ({ 'x-padding': 'p'.repeat(16 * 1024) })],
]) {
  add(`token (append): ${name} → 403`, () => appendWith(headers()), expectError(403, 'forbidden'));
}
add('token: in the query for append (a write route) → 403', () => post(`/streams/${LIVE}/append?token=${liveTok()}`, { body: 'zz' }), expectError(403, 'forbidden'));
add('token: in the query for open (the row stays pending) → 403', () => post(`/streams/${PENDING}/open?token=${tok(PENDING)}`), expectError(403, 'forbidden'));
add('token: in the query for stats → 403', () => req({ path: `/streams/${LIVE}/stats?token=${liveTok()}` }), expectError(403, 'forbidden'));
add('token: read scope on close (the stream stays live) → 403', () => post(`/streams/${LIVE}/close`, { headers: bearer(tok(LIVE, 'read')) }), expectError(403, 'forbidden'));
add('token: read scope on fail → 403', () => postJson(`/streams/${LIVE}/fail`, '{"error":"x"}', tok(LIVE, 'read')), expectError(403, 'forbidden'));
add('token: write scope on cancel (the flag stays 0) → 403', () => post(`/streams/${LIVE}/cancel`, { headers: bearer(tok(LIVE, 'read write')) }), expectError(403, 'forbidden'));
add('token: a read write cancel token in the query of text (a URL may not carry a write token) → 403', () => req({ path: `/streams/${LIVE}/text?token=${liveTok()}` }), expectError(403, 'forbidden'));
add('token: write scope on events (a read route) → 403 JSON, not SSE', () => req({ path: `/streams/${LIVE}/events?token=${tok(LIVE, 'write')}` }), expectError(403, 'forbidden'));
add('token: missing on text → 403', () => req({ path: `/streams/${LIVE}/text` }), expectError(403, 'forbidden'));
add('token: expired on events → 403', () => req({ path: `/streams/${LIVE}/events?token=${tok(LIVE, 'read', { exp: now() - 1 })}` }), expectError(403, 'forbidden'));
add('token: wrong stream on text → 403', () => req({ path: `/streams/${LIVE}/text?token=${tok(PENDING)}` }), expectError(403, 'forbidden'));

// Malformed NDJSON for a `ui` stream (SPEC §9): 400 bad_chunk naming the offset where the bad
// line starts (the stream's seq), nothing of it written, and no fragment of it kept: the
// stream's seq is unchanged and the next append starts a fresh line.
const appendUi = (body) => post(`/streams/${UI_LIVE}/append`, { headers: { ...bearer(tok(UI_LIVE)), 'content-type': 'application/x-ndjson' }, body });
/** One streaming (chunked) append of `pieces`, each written as its own piece. */
async function appendUiStreaming(pieces) {
  const p = openPost(`${stack.baseUrl}/streams/${UI_LIVE}/append`, bearer(tok(UI_LIVE)));
  for (const piece of pieces) await p.send(piece);
  p.end();
  const { status, headers, text } = await p.answer;
  return { status, headers, raw: text, json: JSON.parse(text) };
}
/** Appends that leave an unfinished line (200, nothing pushed), then `last`, whose answer is checked. */
async function afterFragments(fragments, last) {
  for (const f of fragments) {
    const res = await appendUi(f);
    assert.equal(res.status, 200, `the fragment append: ${res.status} ${res.raw}`);
    assert.equal(res.json.seq, UI_TEXT.length, 'an unfinished line is not pushed');
  }
  return appendUi(last);
}
function expectBadChunk(fault) {
  return (res) => {
    expectError(400, 'bad_chunk')(res);
    assert.equal(res.json.offset, UI_TEXT.length, 'the offset where the bad line starts');
    assert.match(res.json.message, fault);
  };
}
const bytes = (...parts) => Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : Buffer.from(p))));
for (const [name, body, fault] of [
  ['not JSON', 'hello world\n', /not JSON/],
  ['JSON without a type', '{"delta":"x","id":"t"}\n', /no "type"/],
  ['a numeric type', '{"type":42}\n', /"type" is a number/],
  ['a null type', '{"type":null}\n', /"type" is null/],
  ['an object as type', '{"type":{"name":"text-delta"}}\n', /"type" is an object/],
  ['duplicate types, the last not a string', '{"type":"text-delta","type":false}\n', /"type" is a boolean/],
  ['an array of chunks', '[{"type":"text-delta"}]\n', /an array, not an object/],
  ['a JSON string', '"text-delta"\n', /a string, not an object/],
  ['a number', '42\n', /a number, not an object/],
  ['an empty line', '\n', /empty/],
  ['a line of spaces', '   \n', /empty/],
  ['a truncated object', '{"type":"text-delta","delta":"ab\n', /not JSON/],
  ['trailing garbage after the object', '{"type":"text-delta"} {}\n', /not JSON/],
  ['a byte-order mark before the object', '\ufeff{"type":"text-delta"}\n', /not JSON/],
  ['a raw control character in a string', '{"type":"text-delta","delta":"a\u0001b"}\n', /not JSON/],
  ['a raw carriage return (CRLF line end)', '{"type":"text-delta"}\r\n', /carriage return/],
  ['a raw carriage return in an unfinished line', '{"type":"text-delta","delta":"a\rb', /carriage return/],
  ['invalid UTF-8 inside a line', bytes('{"type":"text-delta","delta":"', [0xff, 0xfe], '"}\n'), /UTF-8/],
  ['a UTF-8-encoded surrogate', bytes('{"type":"text-delta","delta":"', [0xed, 0xa0, 0x80], '"}\n'), /UTF-8/],
  ['an overlong UTF-8 encoding', bytes('{"type":"text-delta","delta":"', [0xc0, 0xaf], '"}\n'), /UTF-8/],
  ['a bad line first, good lines after it in the same request', '[]\n{"type":"text-delta"}\n', /not an object/],
]) {
  add(`ndjson: ${name} → 400 bad_chunk`, () => appendUi(body), expectBadChunk(fault));
}
add('ndjson: a line split across two appends that turns out invalid → 400 bad_chunk', () => afterFragments(['{"type":"text-delta","delta":"fine so far'], '"} trailing\n'), expectBadChunk(/not JSON/));
add('ndjson: a UTF-8 sequence split across two appends that turns out invalid → 400 bad_chunk', () => afterFragments([bytes('{"type":"text-delta","delta":"', [0xf0, 0x9f])], bytes([0x41], '"}\n')), expectBadChunk(/UTF-8/));
add('ndjson: a line over 1 MiB built across two appends → 400 bad_chunk', () => afterFragments([`{"type":"text-delta","delta":"${'x'.repeat(700_000)}`], 'y'.repeat(400_000)), expectBadChunk(/longer than 1048576 bytes/));
add('ndjson: a streaming append whose line, split across pieces, turns out invalid → 400 bad_chunk', () => appendUiStreaming(['{"type":', '"text-delta","de', 'lta":"x"', '}}\n']), expectBadChunk(/not JSON/));
add('ndjson: a streaming append with invalid UTF-8 across pieces → 400 bad_chunk', () => appendUiStreaming([bytes('{"type":"a","d":"', [0xe6]), bytes([0x97, 0x41], '"}\n')]), expectBadChunk(/UTF-8/));
add('ndjson: open with format "xml" (the row stays pending) → 400', () => post(`/streams/${PENDING}/open`, { headers: { ...bearer(tok(PENDING)), 'content-type': 'application/json' }, body: '{"format":"xml"}' }), expectError(400, 'bad_format'));
add('ndjson: open with format 7 → 400', () => post(`/streams/${PENDING}/open`, { headers: bearer(tok(PENDING)), body: '{"format":7,"meta":{}}' }), expectError(400, 'bad_format'));
add('ndjson: /ui on a text stream → 409', () => req({ path: `/streams/${LIVE}/ui?token=${tok(LIVE, 'read')}` }), expectError(409, 'wrong_format'));
add('ndjson: /ui on a stream never opened → 404', () => req({ path: `/streams/${PENDING}/ui?token=${tok(PENDING, 'read')}` }), expectError(404, 'no_stream'));

// Huge headers on requests that are otherwise fine: served normally.
add('header: 16 KB custom header on a valid /text → 200', () => req({ path: `/streams/${LIVE}/text?token=${tok(LIVE, 'read')}`, headers: { 'x-padding': 'p'.repeat(16 * 1024) } }), (res) => {
  assert.equal(res.status, 200, `${res.status} ${res.raw}`);
  assert.deepEqual(res.json, { text: TEXT, seq: TEXT.length, status: 'streaming', format: 'text' });
});
add('header: 200 headers of 100 bytes on a valid /text → 200', () => req({
  path: `/streams/${LIVE}/text?token=${tok(LIVE, 'read')}`,
  headers: Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`x-h${i}`, 'v'.repeat(100)])),
}), (res) => {
  assert.equal(res.status, 200, `${res.status} ${res.raw}`);
  assert.equal(res.json.text, TEXT);
});

// ---------------------------------------------------------------------------------------

for (const c of cases) {
  test(c.name, { timeout: 30_000 }, async () => {
    results.cases++;
    const before = d1Snapshot(stack.db);
    const liveBefore = await liveState();
    const res = await c.run();
    assert.ok(res.status > 0, `no answer: ${res.error}`);
    assert.ok(res.status < 500, `a 5xx for bad input: ${res.status} ${res.raw}`);
    c.expect(res);
    // A flush commits anything pushed by mistake (and answers once it has), so D1 would show it.
    for (const id of [LIVE, UI_LIVE]) {
      ok(await rawRequest(stack.baseUrl, { method: 'POST', path: `/streams/${id}/flush`, headers: bearer(tok(id)) }), `flush ${id}`);
    }
    assert.deepEqual(await liveState(), liveBefore, 'the live stream changed');
    assert.deepEqual(d1Snapshot(stack.db), before, 'D1 changed');
  });
}

/** A refused request, then the next POST and GET on the same stream must be served normally. */
async function refusedThenNext(id, token, refused) {
  const first = await refused();
  const next = await post(`/streams/${id}/append`, { headers: bearer(token), body: 'x' });
  const get = await req({ path: `/streams/${id}/stats`, headers: bearer(token), timeoutMs: 10_000 });
  return { first, next, get };
}

test('a refused, unread request body (100 KB to 4 MiB) does not break the next request', { timeout: 60_000 }, async () => {
  // Regression: wrangler dev answered the request after an early refusal 503 "Your worker
  // restarted mid-request" until the object discarded unread bodies before answering.
  const id = insertRow(stack, uniqueId('bad-next'));
  const c = api(stack, id);
  ok(await c.open(), 'open');
  for (const [name, refused, status] of [
    ['413 append of MAX_APPEND_BYTES+1', () => post(`/streams/${id}/append`, { headers: bearer(c.token), body: Buffer.alloc(MAX_APPEND_BYTES + 1, 0x61) }), 413],
    ['403 append with a 100 KB body', () => post(`/streams/${id}/append`, { body: Buffer.alloc(100_000, 0x61) }), 403],
    ['403 append with a 4 MiB body', () => post(`/streams/${id}/append`, { body: Buffer.alloc(4 << 20, 0x61) }), 403],
    ['413 open with a body over 1 MiB', () => post(`/streams/${id}/open`, { headers: bearer(c.token), body: 'x'.repeat((1 << 20) + 1) }), 413],
  ]) {
    const { first, next, get } = await refusedThenNext(id, c.token, refused);
    assert.equal(first.status, status, `${name}: ${first.status} ${first.raw}`);
    assert.equal(next.status, 200, `${name}: the next POST: ${next.status} ${next.raw ?? next.error}`);
    assert.equal(get.status, 200, `${name}: the next GET: ${get.status} ${get.raw ?? get.error}`);
  }
});

test('a refused 9 MiB request body (over MAX_APPEND_BYTES, read and discarded: the limit is 100 MiB) does not break the next request', {
  timeout: 60_000,
}, async () => {
  const id = insertRow(stack, uniqueId('bad-next9'));
  const c = api(stack, id);
  ok(await c.open(), 'open');
  try {
    const { first, next, get } = await refusedThenNext(id, c.token, () =>
      post(`/streams/${id}/append`, { headers: bearer(c.token), body: Buffer.alloc(9 << 20, 0x61) }));
    assert.equal(first.status, 413, `${first.status} ${first.raw}`);
    assert.equal(next.status, 200, `the next POST: ${next.status} ${next.raw ?? next.error}`);
    assert.equal(get.status, 200, `the next GET: ${get.status} ${get.raw ?? get.error}`);
  } finally {
    await post('/streams//open'); // absorbs a 503 left behind, so nothing after this test sees it
  }
});

test('HEAD /events on a live stream answers at once and attaches no reader', {
  timeout: 30_000,
}, async () => {
  const id = insertRow(stack, uniqueId('bad-head'));
  const c = api(stack, id);
  ok(await c.open(), 'open');
  ok(await c.append('abc'), 'append');
  const readersBefore = ok(await c.stats(), 'stats').readers;
  const head = await req({ method: 'HEAD', path: `/streams/${id}/events?token=${encodeURIComponent(c.readToken)}`, timeoutMs: 15_000 });
  const readersAfter = ok(await c.stats(), 'stats').readers;
  ok(await c.close(), 'close'); // ends the stuck subscription, whatever happened
  assert.equal(head.status, 200, `HEAD /events: ${head.status} ${head.error ?? ''}`);
  assert.equal(head.headers['content-type'], 'text/event-stream; charset=utf-8', 'HEAD answers the headers a GET would get');
  assert.equal(readersAfter, readersBefore, 'a HEAD request attached a reader');
});

test('bad-input battery summary', (t) => {
  t.diagnostic(`${results.cases} bad-input cases ran (each its own test above); nothing was written to D1 by any of them`);
  assert.ok(results.cases >= 40, `only ${results.cases} cases`);
  const ndjson = cases.filter((c) => c.name.startsWith('ndjson:')).length;
  t.diagnostic(`${ndjson} of them malformed NDJSON for a ui stream`);
  assert.ok(ndjson >= 15, `only ${ndjson} NDJSON cases`);
});

test('ndjson: the lines before a bad one stay; the bad one and the rest of the request are refused', { timeout: 30_000 }, async () => {
  const line = (delta) => `${JSON.stringify({ type: 'text-delta', id: 't', delta })}\n`;
  for (const streaming of [false, true]) {
    const id = insertRow(stack, uniqueId('bad-ui-rest'));
    const c = api(stack, id);
    ok(await c.open(undefined, 'ui'), 'open');
    const kept = line('one 😀') + line('two 日本');
    const body = `${kept}{"type":7}\n${line('never')}{"type":"text-de`;
    let res;
    if (streaming) {
      const p = openPost(c.url('append'), { authorization: `Bearer ${c.token}` });
      for (let i = 0; i < body.length; i += 7) await p.send(body.slice(i, i + 7));
      p.end();
      const a = await p.answer;
      res = { status: a.status, json: JSON.parse(a.text) };
    } else {
      res = await c.append(body);
    }
    assert.equal(res.status, 400, JSON.stringify(res.json));
    assert.deepEqual([res.json.error, res.json.offset], ['bad_chunk', kept.length], `streaming: ${streaming}`);
    const next = line('after');
    assert.equal(ok(await c.append(next), 'the next append').seq, kept.length + next.length, 'it starts a fresh line');
    ok(await c.close(), 'close');
    assert.equal(stack.db.get('SELECT body FROM messages WHERE id = ?', id).body, kept + next, 'D1 holds the kept lines only');
  }
});
