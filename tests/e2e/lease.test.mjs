// The lease alarm's failure rules in the real runtime (SPEC §7, §10; the rules themselves are
// tests/lease_rules.rs, on the core's LeaseAlarm and Revival), through the dev build's
// TEST_FAULTS, with a resume window (the default path: a reset stream is rebuilt first, and only
// its window seals it):
// - the object's storage fails when the alarm reads its keys (ops=storage): the lease is
//   renewed, never released, so the row is not left `streaming`: once the storage answers
//   again the alarm rebuilds the stream, and its window seals it `interrupted` from its durable
//   text;
// - D1 fails the rebuild's claim of the row (ops=claim): the lease is renewed, the row is never
//   sealed at once (it stays `streaming` past the window), and once D1 answers the rebuilt
//   stream waits its window;
// - a D1 call that never answers (kinds=hold) times out after STORE_TIMEOUT_MS, counts as
//   "may have committed" and is retried: the flush it was part of still confirms its text.
// One stack; each test restarts it with its own faults.
import test from 'node:test';
import assert from 'node:assert/strict';
import { startStack } from './harness.mjs';
import { api, newStream, ok, rows, until } from './util.mjs';

const LEASE_MS = 1000;
const WINDOW_MS = 3000;
let stack;

test.before(async () => {
  stack = await startStack({
    name: 'e2e-lease',
    // The idle timeout no longer than the window: a rebuilt stream waits the window.
    vars: { LEASE_MS: String(LEASE_MS), DEV_MODE: '1', STORE_TIMEOUT_MS: '1000', RESUME_WINDOW_MS: String(WINDOW_MS), IDLE_TIMEOUT_MS: String(WINDOW_MS) },
  });
});
test.after(async () => {
  await stack?.stop();
});

const lines = (event) => stack.logs().split('\n').filter((l) => l.includes(`"event":"${event}"`));

/** A stream with "hello 😀" durable, whose object is then lost. */
async function lostStream(name) {
  const c = api(stack, newStream(stack, name));
  ok(await c.open(), 'open');
  ok(await c.append('hello 😀'), 'append');
  ok(await c.flush(), 'flush');
  return c;
}

/** Once its faults are gone, the alarm rebuilds the stream (it claims the row: the host column
 * moves on from `host`, the open's), and only its window seals it. */
async function rebuiltThenSealedByTheWindow(c, host) {
  await until(() => rows(stack, c.id).row.host !== host, 'the alarm to rebuild the stream (its claim of the row)', LEASE_MS + 15_000);
  const rebuiltAt = Date.now();
  assert.equal(rows(stack, c.id).row.status, 'streaming', 'rebuilt, waiting for its producer');
  const row = await until(() => {
    const r = rows(stack, c.id).row;
    return r.status !== 'streaming' && r;
  }, 'the window to seal the row', WINDOW_MS + 15_000);
  assert.ok(Date.now() - rebuiltAt >= WINDOW_MS - 500, `sealed ${Date.now() - rebuiltAt} ms after the rebuild: the window was waited for`);
  assert.equal(row.status, 'interrupted');
  assert.equal(row.body, 'hello 😀', 'the durable text, neither more nor less');
  assert.match(row.error, new RegExp(`did not resume within ${WINDOW_MS} ms`));
}

test('a storage error during the alarm renews the lease; once storage answers the stream is rebuilt and its window seals it, never left streaming', { timeout: 90_000 }, async () => {
  const c = await lostStream('lease-storage');
  const host = rows(stack, c.id).row.host;
  // The object is lost; the restarted runtime's alarm cannot read its keys.
  await stack.kill();
  await stack.restart({ vars: { TEST_FAULTS: 'rate=1;kinds=before;ops=storage' } });
  await until(() => lines('lease_renewed').filter((l) => l.includes('StorageFailed') || l.includes('Storage(')).length >= 2, 'two renewals on a storage error', 20_000);
  assert.equal(lines('lease_released').length, 0, 'a storage error never releases the lease');
  assert.equal(rows(stack, c.id).row.status, 'streaming', 'nothing was decided on unknown keys');
  await stack.kill();
  await stack.restart({ vars: { TEST_FAULTS: '' } });
  await rebuiltThenSealedByTheWindow(c, host);
});

test('a D1 error during the rebuild renews the lease and never seals at once; once D1 answers the rebuilt stream waits its window', { timeout: 90_000 }, async () => {
  const c = await lostStream('lease-claim');
  const host = rows(stack, c.id).row.host;
  const failedBefore = lines('lease_renewed').filter((l) => l.includes('RevivalFailed')).length;
  await stack.kill();
  await stack.restart({ vars: { TEST_FAULTS: 'rate=1;kinds=before;ops=claim' } });
  // The rebuild keeps failing for longer than the window (time passing is what is tested), a
  // renewal a lease apart, and the row is still streaming.
  const failures = () => lines('lease_renewed').filter((l) => l.includes('RevivalFailed')).length - failedBefore;
  const firstFailure = await until(() => failures() > 0 && Date.now(), 'a failed rebuild', 20_000);
  await until(() => Date.now() - firstFailure > WINDOW_MS + LEASE_MS, 'the failures to outlast the window');
  assert.ok(failures() >= 3, `the rebuild was retried a lease apart: ${failures()} failures`);
  assert.equal(rows(stack, c.id).row.status, 'streaming', 'a failed rebuild never seals (before, it fell through to the lease\'s own seal at once)');
  await stack.kill();
  await stack.restart({ vars: { TEST_FAULTS: '' } });
  await rebuiltThenSealedByTheWindow(c, host);
});

test('a D1 call that hangs times out after STORE_TIMEOUT_MS and is retried: the flush confirms its text', { timeout: 60_000 }, async () => {
  // Every checkpoint commits, then its reply never comes.
  await stack.restart({ vars: { TEST_FAULTS: 'rate=1;kinds=hold;ops=append' } });
  const c = api(stack, newStream(stack, 'lease-hang'));
  ok(await c.open(), 'open');
  ok(await c.append('held 字 👍🏽'), 'append');
  const t0 = Date.now();
  const flushed = ok(await c.flush(), 'a flush whose checkpoint hangs');
  assert.equal(flushed.durableSeq, flushed.seq, 'the read-back after the timeout found the write committed');
  assert.ok(Date.now() - t0 >= 1000, 'it waited for the timeout');
  // The timeout's log line (wrangler prints it a moment after the answer).
  await until(() => lines('store_timeout').some((l) => l.includes(c.id) && l.includes('"op":"Checkpoint"')), 'the timeout\'s log line');
  ok(await c.close(), 'close');
  assert.equal(rows(stack, c.id).row.status, 'complete');
});
