// The embedding path (docs/EMBEDDING.md), in the real runtime: examples/embed/ is a Rust Worker
// that depends on rindle-streams without its standalone handler, exports its Durable Object,
// calls handle_request from its own fetch handler and installs its own authorizer, checkpoint
// sink and event hook (see its src/lib.rs for the switches used here). One stack for the file.
//
// Asserted: the app's async authorizer decides every request and sees the reader's join offset
// and the request's headers; a sink refuses an open with 409 open_refused naming its reason
// (not a 503), and nothing is marked; a refused open undoes the lease it armed, so its alarm
// never seals a row another producer holds; the open operation carries the app's meta and the
// start time, the seal write carries `from`; the event hook gets a checkpoint failure with its range;
// and a hook that panics aborts the WebAssembly instance (panic=abort), after which the lease
// armed before the mark seals the lost stream's row `interrupted`, the lost stream's reader
// connection is ended (not left open forever), and the Worker serves again.
import test from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, startStack } from './harness.mjs';
import { api, call, isError, newStream, ok, rawRequest, rows, until, uniqueId, insertRow } from './util.mjs';

const EMBED = join(ROOT, 'examples', 'embed');
const EMBED_SHIM = join(EMBED, 'build', 'worker', 'shim.mjs');
const LEASE_MS = 1500;
const TOKEN = 'let-me-in';

let stack;
test.before(async () => {
  // Never skipped: scripts/test.sh builds the example; a missing build fails here, loudly.
  assert.ok(existsSync(EMBED_SHIM), `${EMBED_SHIM} is missing: run BUILD_CRATE=examples/embed scripts/build.sh`);
  stack = await startStack({ name: 'e2e-embed', config: join(EMBED, 'wrangler.toml'), vars: { LEASE_MS: String(LEASE_MS), RESUME_WINDOW_MS: '0' } });
});
test.after(async () => {
  await stack?.stop();
});

const client = (id) => api(stack, id, { token: TOKEN });

/** The app's log lines of `event` about stream `id`, parsed. */
function appLogs(event, id) {
  return stack
    .logs()
    .split('\n')
    .filter((l) => l.includes(`"event":"${event}"`) && l.includes(`"streamId":"${id}"`))
    .map((l) => JSON.parse(l.slice(l.indexOf('{'))));
}

test("the embedding Worker's own authorizer decides, and sees the reader's join offset and the headers", async () => {
  const c = client(newStream(stack, 'auth'));
  isError(await api(stack, c.id, { token: 'a valid JWT is not this app\'s token' }).open(), 403, 'forbidden', 'another token');
  ok(await c.open(), 'the app\'s token opens');
  // A join reads only the answer's first bytes: an allowed one is an SSE stream that never ends.
  const join = (from, headers) => {
    const url = new URL(c.eventsUrl(from));
    return rawRequest(stack.baseUrl, { path: url.pathname + url.search, headers, timeoutMs: 15_000, until: () => true });
  };
  isError(await join(3, { 'x-deny-from': '3' }), 403, 'forbidden', 'a join at 3 with x-deny-from: 3');
  isError(await join(undefined, { 'x-deny-from': '7', 'last-event-id': '7' }), 403, 'forbidden', 'a join at Last-Event-ID 7 with x-deny-from: 7');
  assert.equal((await join(4, { 'x-deny-from': '3' })).status, 200, 'a join at 4 with x-deny-from: 3');
  assert.equal((await join(3, { 'x-deny-from': '4' })).status, 200, 'a join at 3 with x-deny-from: 4');
  ok(await c.close(), 'close');
});

test('a sink refuses an open with 409 open_refused naming its reason; the open carries meta and the start time, the seal carries from', async () => {
  const refused = client(newStream(stack, 'refused'));
  const r = isError(await refused.open({ refuse: 'the chat is archived' }), 409, 'open_refused', 'a refusing sink');
  assert.match(r.message, /the chat is archived/);
  assert.equal(rows(stack, refused.id).row.status, 'pending', 'a refused open marks nothing');

  const c = client(newStream(stack, 'meta'));
  const before = Date.now();
  ok(await c.open({ chat: 'c9', model: 'm' }), 'open');
  const after = Date.now();
  const [open] = await until(() => appLogs('sink_open', c.id).length && appLogs('sink_open', c.id), 'the sink\'s open line');
  assert.deepEqual(open.fields.meta, { chat: 'c9', model: 'm' });
  assert.ok(open.fields.startedAt >= before - 1000 && open.fields.startedAt <= after + 1000, `startedAt ${open.fields.startedAt}`);

  ok(await c.append('abc😀'), 'append');
  assert.equal(ok(await c.flush(), 'flush').durableSeq, 5);
  ok(await c.append('de'), 'append the tail');
  assert.deepEqual(ok(await c.close(), 'close'), { status: 'complete', seq: 7, durableSeq: 7 });
  const [seal] = await until(() => appLogs('sink_seal', c.id).length && appLogs('sink_seal', c.id), 'the sink\'s seal line');
  assert.deepEqual(seal.fields, { from: 5, seq: 7, bodyFrom: 0 }, 'the seal says what was durable before it');
  assert.equal(ok(await c.text(), '/text').text, 'abc😀de');
});

test('a sink refusing an open of a row another producer holds: the lease armed before the mark is undone, and the row is never sealed by it', async () => {
  const c = client(newStream(stack, 'held'));
  stack.db.run(`UPDATE messages SET status = 'streaming' WHERE id = ?`, c.id); // a producer the app knows of holds it
  isError(await c.open({ refuse: 'another producer holds this message' }), 409, 'open_refused', 'a refusing sink');
  // The alarm armed before the mark still fires, and finds nothing armed (the refusal undid it).
  const released = (l) => l.includes('"event":"lease_released"') && l.includes(`"streamId":"${c.id}"`) && l.includes('nothing armed');
  const outcome = await until(
    () => (rows(stack, c.id).row.status !== 'streaming' ? 'sealed' : stack.logs().split('\n').some(released) && 'left alone'),
    'the alarm to fire',
    LEASE_MS + 10_000,
  );
  assert.equal(outcome, 'left alone', `the alarm sealed the other producer's row ${JSON.stringify(rows(stack, c.id).row.status)}`);
  assert.equal(rows(stack, c.id).row.status, 'streaming');
});

test('the event hook gets a checkpoint failure with its range; a panicking hook aborts the instance, and the lease seals the lost stream interrupted and tells the hook (LeaseExpired)', async () => {
  const c = client(newStream(stack, 'hooked'));
  ok(await c.open({ failAppends: true }), 'open');
  ok(await c.append('abc'), 'append');
  isError(await c.flush(), 503, 'checkpoint_failed', 'a flush whose checkpoints the sink fails');
  const [notice] = await until(() => appLogs('hook', c.id).length && appLogs('hook', c.id), 'the hook\'s notice');
  assert.match(notice.fields.notice, /^CheckpointFailed \{ stream_id: "hooked-[^"]+", from: Offset\(0\), to: Offset\(3\),/);
  ok(await c.close(), 'the seal (a compaction) still commits');

  const p = client(insertRow(stack, uniqueId('panic')));
  ok(await p.open({ failAppends: true }), 'open the stream whose hook panics');
  ok(await p.append('lost with the instance'), 'append');
  // A reader of that stream. The abort leaves its body open in the runtime, with nothing left
  // to write it or close it; the next instance's start ends it, so its client rejoins as after
  // an eviction instead of waiting forever.
  const readerRes = await fetch(p.eventsUrl(0));
  assert.equal(readerRes.status, 200);
  let received = '';
  let readerEnd = null;
  (async () => {
    const decoder = new TextDecoder();
    try {
      for await (const piece of readerRes.body) received += decoder.decode(piece, { stream: true });
      readerEnd = 'closed';
    } catch (e) {
      readerEnd = `failed: ${e.cause?.message ?? e.message}`;
    }
  })();
  await until(() => received.includes('lost with the instance'), 'the reader to hold the text');
  // The flush's checkpoint fails, the hook panics on that notice and the instance aborts: the
  // flush is never answered (awaiting it would take fetch's 300 s header timeout), so it is
  // given up once the lease has sealed the row.
  const giveUp = new AbortController();
  const flushing = call(p.url('flush'), { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` }, signal: giveUp.signal })
    .catch((e) => ({ status: 0, error: String(e) }));
  await until(() => appLogs('hook', p.id).length, 'the hook to be called (and panic)');
  // Nothing in this stream's life seals it (no close, no idle timeout): only the lease can.
  const row = await until(() => {
    const r = rows(stack, p.id).row;
    return r.status !== 'streaming' && r;
  }, 'the lease to seal the lost stream', LEASE_MS + 10_000);
  assert.equal(row.status, 'interrupted', `status; log tail:\n${stack.logs().slice(-2000)}`);
  assert.deepEqual([row.body, row.seq], ['', 0], 'nothing was durable');
  await until(() => stack.logs().split('\n').some((l) => l.includes('"event":"interrupted"') && l.includes(p.id)), 'the lease\'s log line');
  // The hook of the restarted instance is told, after the seal committed (it panics again on it,
  // and that abort costs nothing: the row is sealed, and the alarm's retry finds it so).
  const leaseNotice = await until(
    () => appLogs('hook', p.id).find((n) => n.fields.notice.startsWith('Interrupted')),
    'the hook to be told of the lease\'s interrupted seal',
  );
  assert.match(leaseNotice.fields.notice, /^Interrupted \{ stream_id: "panic-[^"]+", durable_seq: Offset\(0\), cause: LeaseExpired \}$/);
  await until(() => readerEnd, 'the lost stream\'s reader body to end', LEASE_MS + 10_000);
  assert.doesNotMatch(received, /"type":"end"/, 'the reader was cut off, not told of an end it never had');
  assert.ok(stack.logs().includes('"event":"orphaned_readers_ended"'), 'the new instance says it ended the orphaned readers');
  giveUp.abort();
  assert.notEqual((await flushing).status, 200, 'the flush never succeeded');

  const after = client(newStream(stack, 'after'));
  ok(await after.open(), 'the Worker serves again after the abort');
  ok(await after.close(), 'close');
});
