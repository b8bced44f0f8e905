// CORS at the front Worker (issue 38, SPEC §4 "Cross-origin"), header by header against the real
// runtime (the browser's view is tests/browser/cors.test.mjs). With
// ALLOWED_ORIGINS = "http://127.0.0.1:5173, https://*.example.test":
//   * an allowed origin gets its own origin back (never *), credentials allowed, `Vary: Origin`
//     and the headers a page may read, on every answer: reads, writes, errors, 204s, SSE that
//     still streams;
//   * its preflights are answered 204 for the write, cancel and read routes and the chat lookup,
//     with the route's method and the headers asked for;
//   * any other origin, and a request without one, gets no CORS header and exactly the answer it
//     got before: same status, same body (a preflight stays 405).
import test from 'node:test';
import assert from 'node:assert/strict';
import { startStack } from './harness.mjs';
import { api, newStream, ok, rawRequest, uniqueId } from './util.mjs';

const PAGE = 'http://127.0.0.1:5173';
const SUB = 'https://chat.app.example.test';
const OTHER = 'https://evil.example.com';
let stack;
let id; // a live ui stream with two lines
const corsHeaders = (res) => Object.fromEntries(Object.entries(res.headers).filter(([k]) => k.startsWith('access-control-') || k === 'vary'));

test.before(async () => {
  stack = await startStack({ name: 'e2e-cors', vars: { ALLOWED_ORIGINS: `${PAGE}, https://*.example.test` } });
  id = newStream(stack, 'cors');
  const c = api(stack, id);
  ok(await c.open(undefined, 'ui'), 'open');
  ok(await c.append('{"type":"start"}\n{"type":"text-start","id":"t"}\n'), 'append');
});
test.after(() => stack?.stop());

const request = (origin, opts) => rawRequest(stack.baseUrl, { ...opts, headers: { ...(origin ? { origin } : {}), ...opts.headers } });

test('a preflight from an allowed origin is answered 204 for write, cancel, read and chat routes; from any other origin it stays 405', async () => {
  for (const [path, method, headers] of [
    [`/streams/${id}/append`, 'POST', 'authorization, content-type'],
    [`/streams/${id}/open`, 'POST', 'authorization, content-type'],
    [`/streams/${id}/cancel`, 'POST', 'authorization'],
    [`/streams/${id}/ui`, 'GET', 'authorization, last-event-id'],
    [`/streams/chats/c1/stream`, 'GET', 'authorization'],
  ]) {
    for (const origin of [PAGE, SUB]) {
      const res = await request(origin, { method: 'OPTIONS', path, headers: { 'access-control-request-method': method, 'access-control-request-headers': headers } });
      assert.equal(res.status, 204, `${origin} ${method} ${path}: ${res.status} ${res.raw}`);
      assert.equal(res.headers['access-control-allow-origin'], origin);
      assert.equal(res.headers['access-control-allow-credentials'], 'true');
      assert.ok(res.headers['access-control-allow-methods'].split(', ').includes(method), res.headers['access-control-allow-methods']);
      assert.equal(res.headers['access-control-allow-headers'], headers);
      assert.match(res.headers.vary, /Origin/);
    }
    const refused = await request(OTHER, { method: 'OPTIONS', path, headers: { 'access-control-request-method': method } });
    const without = await request(undefined, { method: 'OPTIONS', path });
    assert.equal(refused.status, 405, `${OTHER} ${path}`);
    assert.deepEqual(corsHeaders(refused), {}, 'no CORS header for a disallowed origin');
    assert.deepEqual([refused.status, refused.raw], [without.status, without.raw], 'the same answer as without an origin');
  }
});

test('every answer to an allowed origin carries its CORS headers; any other origin gets the same answer without them', async () => {
  const token = stack.token(id);
  const read = stack.token(id, 'read'); // a token in a URL may not write
  const cases = [
    ['the text', { path: `/streams/${id}/text?token=${read}` }],
    ['a write', { method: 'POST', path: `/streams/${id}/flush`, headers: { authorization: `Bearer ${token}` } }],
    ['a denial', { path: `/streams/${id}/text?token=nope` }],
    ['a bad id', { path: '/streams/a%2Fb/text' }],
    ['an unknown route', { path: `/streams/${id}/nope` }],
    ['a 204 (no answer in the chat)', { path: `/streams/chats/${uniqueId('c')}/stream?token=${stack.token('*', 'read')}` }],
    ['the ending already seen', { path: `/streams/${id}/ui?token=${read}`, headers: { 'last-event-id': 'done' } }],
  ];
  for (const [what, opts] of cases) {
    const allowed = await request(PAGE, opts);
    const other = await request(OTHER, opts);
    const none = await request(undefined, opts);
    assert.equal(allowed.headers['access-control-allow-origin'], PAGE, `${what}: ${allowed.status}`);
    assert.equal(allowed.headers['access-control-allow-credentials'], 'true', what);
    assert.match(allowed.headers['access-control-expose-headers'], /x-vercel-ai-ui-message-stream/, what);
    assert.deepEqual(corsHeaders(other), {}, `${what}: nothing for another origin`);
    assert.deepEqual(corsHeaders(none), {}, `${what}: nothing without an origin`);
    for (const res of [other, none]) {
      assert.equal(res.status, allowed.status, `${what}: the same status`);
      if (!opts.method) assert.equal(res.raw.replace(/"seq":\d+/, ''), allowed.raw.replace(/"seq":\d+/, ''), `${what}: the same body`);
    }
  }
});

test('an SSE answer to an allowed origin still streams: a line appended after the headers arrives before the stream ends', async () => {
  const c = api(stack, id);
  let first = true;
  let sent;
  const got = await request(PAGE, {
    path: `/streams/${id}/ui?token=${c.readToken}`,
    timeoutMs: 20_000,
    until: (text) => {
      if (first && text.includes('"text-start"')) {
        first = false;
        sent = c.append('{"type":"text-delta","id":"t","delta":"live 👋🏽"}\n');
      }
      return text.includes('live 👋🏽');
    },
  });
  assert.equal(got.status, 200);
  assert.equal(got.headers['access-control-allow-origin'], PAGE);
  assert.equal(got.headers['content-type'], 'text/event-stream; charset=utf-8');
  assert.equal(got.headers['x-rindle-lease-ms'], '10000');
  ok(await sent, 'the live append');
  assert.ok(got.raw.includes('live 👋🏽'), 'the live line came through the CORS answer');
});
