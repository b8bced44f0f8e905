// The lease alarm's failure rules in the real runtime (SPEC §7; the rules themselves are
// tests/lease_rules.rs, on the core's LeaseAlarm), through the dev build's TEST_FAULTS:
// - the object's storage fails when the alarm reads its keys (ops=storage): the lease is
//   renewed, never released, so the row is not left `streaming`: once the storage answers
//   again the alarm seals it `interrupted` from its durable text;
// - a D1 call that never answers (kinds=hold) times out after STORE_TIMEOUT_MS, counts as
//   "may have committed" and is retried: the flush it was part of still confirms its text.
// One stack; each test restarts it with its own faults.
import test from 'node:test';
import assert from 'node:assert/strict';
import { startStack } from './harness.mjs';
import { api, newStream, ok, rows, until } from './util.mjs';

const LEASE_MS = 1000;
let stack;

test.before(async () => {
  stack = await startStack({ name: 'e2e-lease', vars: { LEASE_MS: String(LEASE_MS), DEV_MODE: '1', STORE_TIMEOUT_MS: '1000', RESUME_WINDOW_MS: '0' } });
});
test.after(async () => {
  await stack?.stop();
});

const lines = (event) => stack.logs().split('\n').filter((l) => l.includes(`"event":"${event}"`));

test('a storage error during the alarm renews the lease; the row is sealed once storage answers, never left streaming', { timeout: 90_000 }, async () => {
  const c = api(stack, newStream(stack, 'lease-storage'));
  ok(await c.open(), 'open');
  ok(await c.append('hello 😀'), 'append');
  ok(await c.flush(), 'flush');
  // The object is lost; the restarted runtime's alarm cannot read its keys.
  await stack.kill();
  await stack.restart({ vars: { TEST_FAULTS: 'rate=1;kinds=before;ops=storage' } });
  await until(() => lines('lease_renewed').filter((l) => l.includes('StorageFailed')).length >= 2, 'two renewals on a storage error', 20_000);
  assert.equal(lines('lease_released').length, 0, 'a storage error never releases the lease');
  assert.equal(rows(stack, c.id).row.status, 'streaming', 'nothing was decided on unknown keys');
  // The storage answers again: the renewed alarm seals the row from its durable text.
  await stack.kill();
  await stack.restart({ vars: { TEST_FAULTS: '' } });
  const row = await until(() => {
    const r = rows(stack, c.id).row;
    return r.status !== 'streaming' && r;
  }, 'the renewed alarm to seal the row', LEASE_MS + 15_000);
  assert.equal(row.status, 'interrupted');
  assert.equal(row.body, 'hello 😀', 'the durable text, neither more nor less');
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
