// Hostile traffic costs nothing (SPEC §12), against the real runtime: knowing a stream id buys
// an attacker nothing, and a write token does not make the pump a way inside.
//
//   * no-token uploads trickling a byte a second at a live stream: each answered within 100 ms,
//     none reaches the stream's object, and the producer's append p99 with them stays within 1.5×
//     its p99 without them (interleaved rounds, one run);
//   * denied requests of every kind create no object (the dev build's `GET /dev/objects` counts
//     the objects this isolate constructed);
//   * a 60 MiB chunked /open with a write token: 413, and workerd's peak resident memory grows by
//     less than 5 MB (its high-water mark reset first: /proc/<pid>/clear_refs);
//   * pumps aimed at 127.0.0.1, at a path of an allowed origin the list does not hold, through a
//     redirect, and at allowed upstreams answering with a secret: refused or ended `error` with
//     the status and a fixed sentence; the secret reaches neither a reader nor the row, only the
//     log; the internal service is never asked;
//   * a write token in the query: 403 (a read token: 200); readers past MAX_READERS: 429; a /ui
//     line nested 100,000 deep: 400;
//   * 100 readers joining at 0 at once on a stream at the maximum text (MAX_STREAM_BYTES): the
//     isolate's memory (JavaScript heap, its buffers, the wasm memory, through the V8 inspector)
//     stays under 80 MB sampled and 40 MB once collected (the replay encoded once, shared); one
//     byte more is 413 and the stream ends `error` with its text.
//
// The stack is `bare` (workerd and miniflare without wrangler's dev proxy): the proxy holds a
// denial's answer until the client's upload ends (a dev tool's relay, not the runtime), which
// would measure the proxy, not the Worker. docs/SECURITY.md has the table these prove.
import test from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { readFileSync, writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { workerBase } from '../../bench/bench.mjs';
import { connectInspector } from '../../bench/inspector.mjs';
import { INTERNAL_SECRET } from '../../mock/model-server.mjs';
import { mintToken, startMock, startStack } from './harness.mjs';
import { pump } from './pump-helpers.mjs';
import { api, call, checkFrames, isError, newStream, ok, percentile, rows, uniqueId, until, untilEnd } from './util.mjs';

const MAX_READERS = 100;
/** The default MAX_STREAM_BYTES (4 MiB): the stack keeps it. */
const MAX_STREAM_BYTES = 4 << 20;
let stack;
let mock;
let internal; // a stand-in for an internal service a pump must never reach
let worker; // { pid } of the stack's one workerd

test.before(async () => {
  mock = await startMock();
  internal = await startInternal();
  stack = await startStack({
    name: 'e2e-hostile',
    bare: true,
    vars: {
      DEV_MODE: '1',
      MAX_READERS: String(MAX_READERS),
      PUMP_UPSTREAMS: `${mock.url}/v1/ ${mock.url}/_mock/redirect ${mock.url}/_mock/internal`,
    },
  });
  worker = await workerBase(stack);
});
test.after(async () => {
  await stack?.stop();
  await mock?.stop();
  internal?.close();
});

/** An http server that answers every request with the secret, and counts them. */
function startInternal() {
  const server = http.createServer((req, res) => {
    server.asked += 1;
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(`data: ${INTERNAL_SECRET}\n\n`);
  });
  server.asked = 0;
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(Object.assign(server, { url: `http://127.0.0.1:${server.address().port}` }))));
}

const objects = async () => ok(await call(`${stack.baseUrl}/dev/objects`), '/dev/objects').constructed;

/**
 * A no-token upload trickling one byte every `everyMs`: `answered` resolves with its status and
 * how long its answer took from the request's start; it trickles on until `stop()`.
 */
function trickle(path, { everyMs = 1000, headers = {} } = {}) {
  const { hostname, port } = new URL(stack.baseUrl);
  const started = performance.now();
  const req = http.request({ host: hostname, port, method: 'POST', path, agent: false, headers: { 'transfer-encoding': 'chunked', ...headers } });
  req.on('error', () => {});
  const answered = new Promise((resolve) => {
    req.on('response', (res) => {
      const ms = performance.now() - started;
      let raw = '';
      res.on('data', (c) => (raw += c));
      res.on('end', () => resolve({ status: res.statusCode, ms, raw }));
      res.on('error', () => resolve({ status: res.statusCode, ms, raw }));
    });
    req.on('close', () => resolve({ status: 0, ms: performance.now() - started, raw: '' }));
  });
  req.flushHeaders();
  req.write('x');
  const timer = setInterval(() => req.destroyed || req.write('x'), everyMs);
  return { answered, stop: () => (clearInterval(timer), req.destroy()) };
}

/** One plain append on the producer's kept connection; resolves with its latency (ms). */
function timedAppend(agent, path, token) {
  const { hostname, port } = new URL(stack.baseUrl);
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const req = http.request({ host: hostname, port, method: 'POST', path, agent, headers: { authorization: `Bearer ${token}`, 'content-type': 'text/plain' } }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve(performance.now() - started) : reject(new Error(`append: ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end('x');
  });
}

test('no-token uploads trickling a byte a second are answered at once, reach no object, and leave the producer\'s p99 within 1.5×', { timeout: 180_000 }, async (t) => {
  // 8 rounds of 40 appends each way: 320 samples a condition, so a p99 is the 4th slowest, not
  // one stall of a shared machine; the rounds alternate, so a change of its load falls on both.
  // Even so, on a loaded 2-core machine one such p99 ratio between two identical conditions
  // ranged 0.47-1.28× (measured, three runs beside a 100,000-request fuzz): the measurement is
  // made up to 3 times, and holds if one holds. Cost the uploads put on the producer shows in
  // every attempt; every upload of every attempt must be answered within 100 ms.
  const ROUNDS = 8;
  const APPENDS = 40;
  const HOSTILE = 50;
  const ATTEMPTS = 3;
  const id = newStream(stack, 'hostile-live');
  const s = api(stack, id);
  ok(await s.open(), 'open');
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.after(() => agent.destroy());
  const path = `/streams/${id}/append`;
  const appends = async () => {
    const out = [];
    for (let i = 0; i < APPENDS; i++) out.push(await timedAppend(agent, path, s.token));
    return out;
  };
  for (let i = 0; i < 20; i++) await timedAppend(agent, path, s.token); // a warm connection and isolate
  const objectsBefore = await objects();
  const p99 = (xs) => percentile([...xs].sort((a, b) => a - b), 99);
  const ratios = [];
  let answered = 0;
  for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
    const quiet = [];
    const under = [];
    const answers = [];
    for (let round = 0; round < ROUNDS; round++) {
      quiet.push(...(await appends()));
      // Started 2 ms apart (a load shape, not a wait for anything): each answer is timed alone.
      const uploads = [];
      for (let i = 0; i < HOSTILE; i++) {
        uploads.push(trickle(i % 5 === 4 ? `/streams/${uniqueId('fresh')}/append` : path));
        await new Promise((r) => setTimeout(r, 2));
      }
      answers.push(...(await Promise.all(uploads.map((u) => u.answered))));
      under.push(...(await appends())); // the uploads trickle on meanwhile
      for (const u of uploads) u.stop();
    }
    for (const a of answers) assert.equal(a.status, 403, `a no-token upload: ${a.status} ${a.raw}`);
    const slowest = Math.max(...answers.map((a) => a.ms));
    assert.ok(slowest < 100, `every hostile upload answered within 100 ms: the slowest took ${slowest.toFixed(1)} ms`);
    answered += answers.length;
    const [base, hostile] = [p99(quiet), p99(under)];
    ratios.push(hostile / base);
    t.diagnostic(`attempt ${attempt}: append p99 ${base.toFixed(2)} ms quiet, ${hostile.toFixed(2)} ms under ${HOSTILE} trickling uploads (${(hostile / base).toFixed(2)}×); slowest of ${answers.length} hostile answers ${slowest.toFixed(1)} ms`);
    if (hostile <= 1.5 * base) break;
  }
  assert.equal(await objects(), objectsBefore, 'no object was created (a fifth of the uploads named fresh ids)');
  const meter = ok(await s.stats(), 'stats').meter;
  assert.equal(meter.requests.append, 20 + 2 * ROUNDS * APPENDS * ratios.length, `the object served the producer's appends only (${answered} hostile): ${JSON.stringify(meter.requests)}`);
  assert.ok(Math.min(...ratios) <= 1.5, `append p99 under hostile uploads above 1.5× its p99 without them in every attempt: ${ratios.map((r) => r.toFixed(2)).join(', ')}`);
  ok(await s.close(), 'close');
});

test('a denied request of any kind creates no object', { timeout: 60_000 }, async () => {
  const before = await objects();
  const fresh = () => uniqueId('never');
  const tok = (stream, scope, extra) => mintToken({ stream, scope, ...extra }, stack.secret);
  const denied = [
    () => call(`${stack.baseUrl}/streams/${fresh()}/open`, { method: 'POST', body: '{}' }),
    () => call(`${stack.baseUrl}/streams/${fresh()}/append`, { method: 'POST', headers: { authorization: 'Bearer not.a.jwt' }, body: 'x' }),
    () => call(`${stack.baseUrl}/streams/${fresh()}/events?token=${tok('other', 'read')}`),
    () => call(`${stack.baseUrl}/streams/${fresh()}/ui`),
    () => call(`${stack.baseUrl}/streams/${fresh()}/text?token=${tok('*', 'read write')}`), // a write token in a URL
    () => call(`${stack.baseUrl}/streams/${fresh()}/cancel`, { method: 'POST', headers: { authorization: `Bearer ${tok('*', 'read')}` } }),
    () => call(`${stack.baseUrl}/streams/${fresh()}/stats`, { headers: { authorization: `Bearer ${tok('*', 'write', { exp: 4_000_000_000 })}` } }), // lives too long
    () => call(`${stack.baseUrl}/streams/${fresh()}/pump`, { method: 'POST', headers: { authorization: `Bearer ${mintToken({ stream: '*', scope: 'write' }, 'another-secret-0123456789')}` }, body: '{}' }),
    () => call(`${stack.baseUrl}/streams/${fresh()}/ui?chat=c1&token=${mintToken({ chat: 'c2', scope: 'read' }, stack.secret)}`),
  ];
  for (const ask of denied) isError(await ask(), 403, 'forbidden', 'a denied request');
  assert.equal(await objects(), before, 'no object was created by 9 denied requests at 9 fresh ids');
  const id = newStream(stack, 'counted');
  ok(await api(stack, id).open(), 'open');
  assert.equal(await objects(), before + 1, 'an allowed request does create one: the counter counts');
});

/** A chunked /open of `mib` MiB with a write token, as fast as the socket takes it; its answer. */
function bigOpen(id, mib) {
  const chunk = Buffer.alloc(64 << 10, 0x20); // blank JSON: every byte one the parser would take
  const { hostname, port } = new URL(stack.baseUrl);
  return new Promise((resolve, reject) => {
    const headers = { authorization: `Bearer ${stack.token(id)}`, 'transfer-encoding': 'chunked' };
    const req = http.request({ host: hostname, port, method: 'POST', path: `/streams/${id}/open`, agent: false, headers }, (r) => {
      let raw = '';
      r.on('data', (c) => (raw += c));
      r.on('end', () => resolve({ status: r.statusCode, raw }));
    });
    req.on('error', reject);
    let sent = 0;
    const write = () => {
      while (sent < mib << 20) {
        sent += chunk.length;
        if (!req.write(chunk)) return req.once('drain', write);
      }
      req.end();
    };
    write();
  });
}

test('a 60 MiB chunked /open is refused 413, and workerd\'s peak memory grows by less than 5 MB', { timeout: 120_000 }, async (t) => {
  const status = () => readFileSync(`/proc/${worker.pid}/status`, 'utf8');
  const kb = (name) => Number(new RegExp(`${name}:\\s+(\\d+)`).exec(status())[1]);
  // The first large body through an isolate grows its heaps once (20-30 MB measured), which
  // every later one reuses: measured is a body after that one, what each costs.
  assert.equal((await bigOpen(newStream(stack, 'big-open-warm'), 60)).status, 413, 'the first one');
  const id = newStream(stack, 'big-open');
  writeFileSync(`/proc/${worker.pid}/clear_refs`, '5'); // the high-water mark starts again from now
  const rssBefore = kb('VmRSS');
  const res = await bigOpen(id, 60);
  const peakGrowthKb = kb('VmHWM') - rssBefore;
  t.diagnostic(`413 after 60 MiB; workerd resident ${rssBefore} KB before, peak growth ${peakGrowthKb} KB`);
  assert.equal(res.status, 413, res.raw);
  assert.equal(JSON.parse(res.raw).error, 'too_large');
  assert.ok(peakGrowthKb < 5 * 1024, `workerd's peak resident memory grew ${peakGrowthKb} KB (< 5,120 KB)`);
  assert.equal(rows(stack, id).row.status, 'pending', 'nothing was opened');
});

test('pumps aimed inward are refused, a redirect is not followed, and no upstream body reaches a reader', { timeout: 60_000 }, async () => {
  const secretless = (what, text) => assert.ok(!String(text ?? '').includes(INTERNAL_SECRET), `${what} holds the secret: ${text}`);
  const askedBefore = internal.asked;
  const chat = { format: 'openai-chat', body: { model: 'mock', stream: true, messages: [] } };
  const opened = async (prefix) => {
    const s = api(stack, newStream(stack, prefix));
    ok(await s.open(), 'open');
    return s;
  };
  // Refused before any fetch: 127.0.0.1 (an internal service), a path of an allowed origin the
  // list does not hold, a dot segment out of an allowed prefix.
  for (const [what, url] of [
    ['127.0.0.1', `${internal.url}/secrets`],
    ['an allowed origin\'s unlisted path', `${mock.url}/admin/secrets`],
    ['a dot segment', `${mock.url}/v1/../_mock/nope`],
    ['the cloud metadata address', 'http://169.254.169.254/latest/meta-data/'],
  ]) {
    const s = await opened('pump-refused');
    const res = await pump(s, { ...chat, url });
    isError(res, 400, 'bad_upstream', what);
    assert.match(res.json.message, /PUMP_UPSTREAMS|dot segment/, what);
    ok(await s.close(), 'the stream goes on: close');
  }
  // Allowed, and ended `error` with the status and a fixed sentence: a redirect to the internal
  // service (never followed), an error answer and a stream of events holding the secret.
  for (const [what, url, error] of [
    ['a redirect inward', `${mock.url}/_mock/redirect?to=${encodeURIComponent(`${internal.url}/secrets`)}`, 'the upstream answered HTTP 302, a redirect, which a pump never follows'],
    ['an error answer', `${mock.url}/_mock/internal`, 'the upstream answered HTTP 500'],
    ['events that are no model API\'s', `${mock.url}/_mock/internal?status=200`, 'the upstream sent an event the pump cannot read'],
  ]) {
    const s = await opened('pump-secret');
    const reader = await s.events(0);
    assert.equal((await pump(s, { ...chat, url })).status, 202, what);
    const frames = await untilEnd(reader);
    const end = checkFrames(frames, what).end;
    assert.deepEqual([end.status, end.error], ['error', error], what);
    for (const f of frames) secretless(`${what}: a reader's frame`, f.data);
    const { row } = rows(stack, s.id);
    assert.deepEqual([row.status, row.error], ['error', error], what);
    secretless(`${what}: the row`, JSON.stringify(row));
    secretless(`${what}: /text`, (await s.text()).raw);
  }
  assert.equal(internal.asked, askedBefore, 'the internal service was never asked');
  assert.ok(stack.logs().includes(INTERNAL_SECRET), 'the detail went to the log');
});

test('a write token in the query is refused; a read token passes', { timeout: 30_000 }, async () => {
  const s = api(stack, newStream(stack, 'query-token'));
  ok(await s.open(), 'open');
  ok(await s.append('hi'), 'append');
  for (const scope of ['read write cancel', 'write', 'read write']) {
    isError(await call(`${s.url('text')}?token=${stack.token(s.id, scope)}`), 403, 'forbidden', `a ${scope} token in the query`);
  }
  for (const scope of ['read', 'read cancel']) ok(await call(`${s.url('text')}?token=${stack.token(s.id, scope)}`), `a ${scope} token in the query`);
  ok(await call(s.url('text'), { headers: { authorization: `Bearer ${s.token}` } }), 'a write token in the header');
  ok(await s.close(), 'close');
});

test(`readers past MAX_READERS (${MAX_READERS}) get 429 until one leaves`, { timeout: 60_000 }, async (t) => {
  const s = api(stack, newStream(stack, 'many-readers'));
  ok(await s.open(undefined, 'ui'), 'open a ui stream (read on /events and /ui alike)');
  const readers = [];
  t.after(() => readers.forEach((r) => r.close()));
  for (let i = 0; i < MAX_READERS; i++) readers.push(await s.events(0));
  assert.deepEqual(readers.map((r) => r.status), Array(MAX_READERS).fill(200));
  const refused = isError(await call(s.eventsUrl(0)), 429, 'too_many_readers', 'one reader more');
  assert.equal(refused.maxReaders, MAX_READERS);
  isError(await call(s.uiUrl(0)), 429, 'too_many_readers', 'one /ui reader more');
  readers.shift().close();
  // The runtime learns a connection closed when it next writes to it: a line for every reader.
  ok(await call(s.url('append'), { method: 'POST', headers: { authorization: `Bearer ${s.token}` }, body: '{"type":"start"}\n' }), 'append');
  await until(async () => ok(await s.stats(), 'stats').readers === MAX_READERS - 1, 'the reader that left is detached');
  const again = await s.events(0);
  readers.push(again);
  assert.equal(again.status, 200, 'a reader joins once one left');
  ok(await s.close(), 'close');
});

test('a /ui line nested 100,000 deep is refused 400 bad_chunk, and nothing of it is written', { timeout: 30_000 }, async () => {
  const s = api(stack, newStream(stack, 'deep'));
  ok(await s.open(undefined, 'ui'), 'open a ui stream');
  const deep = `{"type":"data-x","data":${'['.repeat(100_000)}${']'.repeat(100_000)}}\n`;
  const res = await call(s.url('append'), { method: 'POST', headers: { authorization: `Bearer ${s.token}`, 'content-type': 'application/x-ndjson' }, body: deep });
  isError(res, 400, 'bad_chunk', 'a line nested 100,000 deep');
  assert.match(res.json.message, /nests objects and arrays more than 64 deep/);
  assert.equal(ok(await s.stats(), 'stats').seq, 0, 'nothing pushed');
  ok(await s.close(), 'close');
});

test('100 readers joining at 0 at once on a stream at the maximum text hold one replay between them; one byte more is 413 and the stream ends error', { timeout: 120_000 }, async (t) => {
  const s = api(stack, newStream(stack, 'burst'));
  ok(await s.open(), 'open');
  const piece = 'a'.repeat(512 << 10);
  for (let sent = 0; sent < MAX_STREAM_BYTES; sent += piece.length) ok(await s.append(piece), 'append');
  const inspector = await connectInspector(stack.inspectorPort);
  t.after(() => inspector.close());
  const isolateKb = async ({ gc = false } = {}) => {
    if (gc) await inspector.send('HeapProfiler.collectGarbage');
    const h = await inspector.send('Runtime.getHeapUsage');
    const wasm = ok(await s.stats(), 'stats').wasmHeap.memoryBytes;
    return Math.round((h.usedSize + (h.backingStorageSize ?? 0) + wasm) / 1024);
  };
  const before = await isolateKb({ gc: true });
  const { hostname, port } = new URL(stack.baseUrl);
  const readers = [];
  const joined = Array.from({ length: 100 }, () => new Promise((resolve, reject) => {
    const req = http.get({ host: hostname, port, path: `/streams/${s.id}/events?from=0&token=${s.readToken}`, agent: false }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`a reader: ${res.statusCode}`));
      const reader = { got: 0, text: '', req };
      readers.push(reader);
      res.setEncoding('utf8');
      res.on('data', (c) => {
        reader.got += c.length;
        reader.text += c.length < 200 ? c : c.slice(-200); // the frames after the replay
        if (reader.got >= MAX_STREAM_BYTES) resolve(reader);
      });
      res.on('error', () => {});
    });
    req.on('error', reject);
  }));
  let peak = before;
  let all = false;
  Promise.all(joined).then(() => (all = true), () => (all = true));
  while (!all) peak = Math.max(peak, await isolateKb()); // sampled while the replays go out
  await Promise.all(joined);
  const after = await isolateKb({ gc: true });
  t.diagnostic(`isolate ${before} KB before, ${peak} KB sampled at most during the burst, ${after} KB collected after (100 readers, ${MAX_STREAM_BYTES} bytes each)`);
  assert.ok(peak < 80 * 1024, `the isolate's memory sampled during the burst: ${peak} KB (< 80 MB)`);
  assert.ok(after < 40 * 1024, `the isolate's memory once collected: ${after} KB (< 40 MB)`);
  // One byte more: 413, and the stream ends `error` with the text it has.
  const res = await s.append('b');
  const refused = isError(res, 413, 'stream_too_large', 'one byte past MAX_STREAM_BYTES');
  assert.deepEqual([refused.maxBytes, refused.seq], [MAX_STREAM_BYTES, MAX_STREAM_BYTES]);
  await until(() => readers.every((r) => r.text.includes('"type":"end"')), 'every reader got its end');
  for (const r of readers) r.req.destroy();
  const { row } = rows(stack, s.id);
  assert.equal(row.status, 'error');
  assert.match(row.error, /MAX_STREAM_BYTES/);
  assert.equal(ok(await s.text(), '/text').text.length, MAX_STREAM_BYTES, 'the text it had is kept');
});
