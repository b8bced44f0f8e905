// A seeded fuzz of the HTTP surface (SPEC §4, §12), against the real runtime: random routes,
// methods, headers, tokens, query strings, bodies and chunkings, aimed at streams in every state
// (live text and `ui` streams, a row never opened, a sealed stream, ids with no row). For every
// request: an answer below 500 (a 4xx is the JSON error shape), and a refused request changes no
// row; at the end, no panic in the log.
//
//   FUZZ_REQUESTS=n (default 600 here; 100,000 by hand: docs/TESTING.md)   E2E_SEED=s replays
//
// Checkpoints run only on a flush or a seal here (CHECKPOINT_CHARS and CHECKPOINT_INTERVAL_MS far
// out of reach), so a row changes only when a request writes it: a refused request that changed
// a row would show at once. The stack is `bare` (workerd without wrangler's dev proxy, whose relay
// holds each denial's answer until its body ends).
import test from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { mintToken, startStack } from './harness.mjs';
import { api, d1Snapshot, insertRow, ok, rng, seedFromEnv, uniqueId } from './util.mjs';

const REQUESTS = Number(process.env.FUZZ_REQUESTS ?? 600);
const SEED = seedFromEnv();
let stack;

test.before(async () => {
  stack = await startStack({
    name: 'e2e-fuzz',
    bare: true,
    vars: {
      CHECKPOINT_CHARS: String(1 << 20),
      UI_CHECKPOINT_CHARS: String(1 << 20),
      CHECKPOINT_INTERVAL_MS: '600000',
      // Nothing a fuzzed pump names is allowed: an accepted pump would write rows later, on its own.
      PUMP_UPSTREAMS: 'https://upstream.invalid/v1/',
      MAX_APPEND_BYTES: String(64 << 10),
    },
  });
});
test.after(async () => {
  await stack?.stop();
});

/** The stream id rules (engine/access/stream_id.rs). */
const validId = (id) => /^[A-Za-z0-9._:-]{1,128}$/.test(id) && !id.startsWith('.') && !id.includes('..');

const ACTIONS = ['open', 'append', 'flush', 'close', 'fail', 'events', 'ui', 'stream', 'text', 'cancel', 'pump', 'stats', 'resume'];
const READS = new Set(['events', 'ui', 'stream', 'text']);
const GETS = new Set(['events', 'ui', 'stream', 'text', 'stats']);

/** One request on its own connection, its body sent whole or in random pieces. */
function send(r, { method, path, headers, body, chunked }) {
  const { hostname, port } = new URL(stack.baseUrl);
  return new Promise((resolve) => {
    const h = { ...headers };
    if (body !== undefined && !chunked) h['content-length'] = String(body.length);
    if (body !== undefined && chunked) h['transfer-encoding'] = 'chunked';
    const req = http.request({ host: hostname, port, method, path, agent: false, headers: h }, (res) => {
      const bufs = [];
      let size = 0;
      res.on('data', (c) => {
        size += c.length;
        if (size < 1 << 16) bufs.push(c);
        // An SSE answer streams on: its head and first bytes are enough.
        if (/event-stream/.test(res.headers['content-type'] ?? '') && size > 0) res.destroy();
      });
      const done = () => resolve({ status: res.statusCode, type: res.headers['content-type'] ?? '', raw: Buffer.concat(bufs).toString('utf8') });
      res.on('end', done);
      res.on('close', done);
      res.on('error', done);
    });
    req.setTimeout(20_000, () => req.destroy(new Error('no answer within 20 s')));
    req.on('error', (e) => resolve({ status: 0, raw: e.message }));
    if (body === undefined) return req.end();
    if (!chunked) return req.end(body);
    let at = 0;
    const next = () => {
      if (at >= body.length) return req.end();
      const n = r.int(1, Math.max(1, Math.min(body.length - at, r.pick([1, 3, 64, 4096]))));
      req.write(body.subarray(at, at + n));
      at += n;
      setImmediate(next);
    };
    next();
  });
}

/** Random bytes of a few kinds: text, JSON the routes take (or nearly), NDJSON, invalid UTF-8. */
function randomBody(r) {
  const text = () => r.pick(['hi', 'héllo 😀 ', '日本語', '\u0000', 'a'.repeat(r.int(0, 3000)), '{"type":"start"}\n', '\ud800']);
  const json = () => {
    const shapes = [
      { format: r.pick(['text', 'ui', 'xml', 7, null]), meta: r.pick([undefined, { a: 1 }, 'x', [[[[]]]]]) },
      { error: r.pick(['boom', '\u0000', 'x'.repeat(70_000), 3]) },
      { format: r.pick(['openai-chat', 'anthropic', 'openai-responses', 'gemini']), url: r.pick(['http://127.0.0.1:1/v1/chat', 'https://upstream.invalid/v2/x', 'http://169.254.169.254/', 'https://upstream.invalid/v1/../x', 'ftp://x', '']), body: { stream: r.chance(0.5) }, auth: r.pick([undefined, { secret: 'STREAM_JWT_SECRET' }, 'x']) },
      { type: r.pick(['start', 'text-delta', 'finish', 'data-x', 'nope']), id: 't', delta: r.pick(['d', 7]) },
    ];
    return JSON.stringify(r.pick(shapes));
  };
  const kind = r.int(0, 5);
  if (kind === 0) return undefined;
  if (kind === 1) return Buffer.from(Array.from({ length: r.int(1, 5) }, text).join(''));
  if (kind === 2) return Buffer.from(json());
  if (kind === 3) return Buffer.from(Array.from({ length: r.int(1, 6) }, () => (r.chance(0.8) ? json() : text())).join('\n') + (r.chance(0.7) ? '\n' : ''));
  if (kind === 4) return Buffer.from(Array.from({ length: r.int(1, 300) }, () => r.int(0, 255)));
  return Buffer.alloc(r.pick([65 << 10, 70_000, 200_000]), 0x61); // past the small bodies' and the append's bounds
}

test(`${REQUESTS} seeded requests of random routes, headers, bodies and chunkings: no 5xx, no panic, no row changed by a refusal (E2E_SEED=${SEED})`, { timeout: 3_600_000 }, async (t) => {
  const r = rng(SEED);
  const fail = (what) => assert.fail(`${what} (E2E_SEED=${SEED})`);
  // The streams aimed at, renewed when a request ends them.
  const pool = {};
  const live = async (format) => {
    const id = insertRow(stack, uniqueId(`fz-${format}`));
    ok(await api(stack, id).open(undefined, format === 'ui' ? 'ui' : undefined), `open a ${format} stream`);
    return id;
  };
  const renew = async () => {
    for (const format of ['text', 'ui']) {
      const id = pool[format];
      const state = id && (await api(stack, id).stats()).json?.state;
      if (state !== 'Live') pool[format] = await live(format);
    }
  };
  await renew();
  pool.pending = insertRow(stack, uniqueId('fz-pending'));
  pool.sealed = await live('text');
  ok(await api(stack, pool.sealed).close(), 'seal one');
  const counts = {};
  for (let i = 0; i < REQUESTS; i++) {
    const target = r.pick(['text', 'ui', 'pending', 'sealed', 'fresh', 'fresh']);
    const id = target === 'fresh' ? r.pick([uniqueId('fz-none'), 'chats', '*', 'a'.repeat(r.int(1, 300))]) : pool[target];
    const action = r.chance(0.95) ? r.pick(ACTIONS) : r.pick(['', 'nope', 'events/x', '..', '%2e%2e', 'open%00']);
    const method = r.chance(0.85) ? (GETS.has(action) ? r.pick(['GET', 'GET', 'HEAD']) : 'POST') : r.pick(['PUT', 'DELETE', 'PATCH', 'OPTIONS', 'GET', 'POST']);
    const scope = r.pick(['read', 'write', 'cancel', 'read write cancel', 'read cancel', '']);
    // Half the requests carry a token their route accepts (read-only in a URL), so the fuzz
    // reaches past the door as often as it knocks on it.
    const fits = READS.has(action) ? 'read' : action === 'cancel' ? 'cancel' : 'write';
    const fitting = r.chance(0.5);
    const token = fitting ? mintToken({ stream: id, scope: fits }, stack.secret) : r.pick([
      () => undefined,
      () => 'garbage',
      () => mintToken({ stream: id, scope }, stack.secret),
      () => mintToken({ stream: id, scope }, stack.secret),
      () => mintToken({ stream: '*', scope, exp: Math.floor(Date.now() / 1000) - r.int(1, 10) }, stack.secret),
      () => mintToken({ stream: id, scope, claims: { nbf: 4_000_000_000 } }, stack.secret),
      () => mintToken({ stream: id, scope, exp: 4_000_000_000 }, stack.secret),
      () => mintToken({ stream: id, scope }, 'another-secret-0123456789'),
      () => mintToken({ stream: id, scope, alg: 'none' }, stack.secret),
      () => mintToken({ chat: r.pick(['c1', 'c2']), scope }, stack.secret),
    ])();
    const inQuery = token !== undefined && (READS.has(action) ? r.chance(0.6) : r.chance(0.05));
    const query = new URLSearchParams();
    if (inQuery) query.set('token', token);
    if (r.chance(0.3)) query.set('from', r.pick(['0', '3', '-1', 'x', '1e9', '99999999999999999999']));
    if (r.chance(0.1)) query.set('chat', r.pick(['c1', 'c2', 'a/b', '']));
    const headers = {};
    if (token !== undefined && !inQuery) headers.authorization = r.pick([`Bearer ${token}`, `bearer ${token}`, `Basic ${token}`, token]);
    // What the front Worker lets through to the object (which reads every body it gets); it
    // answers the rest at once, reading nothing: a valid id and route, the route's method, the
    // fitting token where the route takes it, and a chat (on a read) that is the row's.
    const chat = READS.has(action) ? query.get('chat') : null;
    const passes =
      fitting &&
      validId(id) &&
      ACTIONS.includes(action) &&
      (method === (GETS.has(action) ? 'GET' : 'POST') || (method === 'HEAD' && GETS.has(action))) &&
      (inQuery ? READS.has(action) : /^[Bb]earer /.test(headers.authorization ?? '')) &&
      (chat === null || (chat === 'c1' && target !== 'fresh'));
    if (r.chance(0.3)) headers['content-type'] = r.pick(['text/plain', 'application/json', 'application/x-ndjson', 'x/y']);
    if (r.chance(0.2)) headers['last-event-id'] = r.pick(['0', '5', 'done', '-3', 'x']);
    if (r.chance(0.1)) headers['x-rindle-epoch'] = r.pick(['1', '2', '0', 'x', '99']);
    if (r.chance(0.1)) headers.origin = r.pick(['https://evil.example', 'null']);
    const body = method === 'GET' || method === 'HEAD' ? undefined : randomBody(r);
    const q = query.toString();
    const path = action.startsWith('chats') ? `/streams/chats/${id}/stream` : `/streams/${id}/${action}${q ? `?${q}` : ''}`;
    const before = d1Snapshot(stack.db);
    const res = await send(r, { method, path, headers, body, chunked: body !== undefined && r.chance(0.5) });
    const label = `#${i} ${method} ${path.slice(0, 120)} (${body?.length ?? 0} bytes) → ${res.status} ${res.raw.slice(0, 200)}`;
    // A body the front Worker does not read: the runtime may close the connection once it
    // answered (a socket closed with unread bytes sends a reset), and a client still sending
    // can lose that answer. Nothing reached an object; the answer is not there to check.
    const reset = res.status === 0 && /ECONNRESET|EPIPE/.test(res.raw) && !passes && body !== undefined;
    const outcome = reset ? 'reset' : res.status;
    counts[outcome] = (counts[outcome] ?? 0) + 1;
    if (reset) {
      assert.deepEqual(d1Snapshot(stack.db), before, `a refused request changed a row: ${label} (E2E_SEED=${SEED})`);
      continue;
    }
    if (!(res.status >= 200 && res.status < 500)) fail(`no answer below 500: ${label}`);
    if (res.status >= 400 && method !== 'HEAD') {
      let error;
      try {
        error = JSON.parse(res.raw);
      } catch {
        fail(`a refusal is JSON: ${label}`);
      }
      if (typeof error.error !== 'string' || typeof error.message !== 'string') fail(`the SPEC §4 shape: ${label}`);
      assert.deepEqual(d1Snapshot(stack.db), before, `a refused request changed a row: ${label} (E2E_SEED=${SEED})`);
    } else if (res.status < 300 && method === 'POST') {
      // An accepted write: commit what it pushed (a row changes only by a request), and keep a
      // live stream of each format to aim at.
      for (const format of ['text', 'ui']) await api(stack, pool[format]).flush();
      await renew();
    }
  }
  assert.ok(!/panicked/.test(stack.logs()), `no panic in the log (E2E_SEED=${SEED})`);
  t.diagnostic(`E2E_SEED=${SEED}: ${REQUESTS} requests, answers ${JSON.stringify(counts)}`);
});
