// A stuck Postgres connection is dropped and replaced (the Postgres backend: the Worker reaches
// the real server through wrangler's local Hyperdrive and a relay of the test's own, relay.mjs).
// The relay black-holes every connection open at one moment (each stays open and carries
// nothing, as a half-open socket does) and carries the new ones. A checkpoint on the stuck
// connection gets no answer; the shell gives it up at STORE_TIMEOUT_MS, which drops the
// connection, and the retry connects anew: the stream recovers, its checkpoints and seal land,
// the row ends `complete` with the whole text. Before the fix the shell's timeout (equal to or
// shorter than the executor's own deadline) dropped the call, never the connection, and every
// retry reused the stuck one: the flush failed 503 `checkpoint_failed` ("no answer in 1500 ms"
// four times over), and so would every checkpoint and seal after it.
import test from 'node:test';
import assert from 'node:assert/strict';
import { startStack } from '../e2e/harness.mjs';
import { clusterUrl } from '../e2e/pg.mjs';
import { api, newStream, ok, rows } from '../e2e/util.mjs';
import { startRelay, via } from './relay.mjs';

/** Short, so the test takes seconds; below the executor's own 15 s deadline, as it was by default (equal). */
const STORE_TIMEOUT_MS = 1500;

let stack;
let relay;
test.before(async () => {
  relay = await startRelay(Number(new URL(clusterUrl()).port));
  // Checkpoints only when flushed, so each one is a step of the test.
  stack = await startStack({
    name: 'e2e-pg-stuck',
    backend: 'postgres',
    pgVia: via(relay.port),
    vars: { STORE_TIMEOUT_MS: String(STORE_TIMEOUT_MS), CHECKPOINT_CHARS: '100000', CHECKPOINT_INTERVAL_MS: '60000' },
  });
});
test.after(async () => {
  await stack?.stop();
  relay?.close();
});

test('a connection that goes silent (black-holed, never reset) is dropped and replaced: the checkpoint and the seal land on a new one', { timeout: 120_000 }, async () => {
  const s = api(stack, newStream(stack, 'pg-stuck'));
  ok(await s.open(), 'open');
  ok(await s.append('before '), 'append');
  assert.equal(ok(await s.flush(), 'flush on the first connection').durableSeq, 7);
  const connections = relay.connections;
  relay.blackhole(); // the Worker's connection now carries nothing, and stays open
  ok(await s.append('after 🕳️ '), 'append');
  const flushed = ok(await s.flush(), 'flush after the connection went silent');
  assert.equal(flushed.durableSeq, 'before after 🕳️ '.length, 'the checkpoint landed');
  assert.ok(relay.connections > connections, `a new connection was made (${relay.connections} accepted, ${connections} before)`);
  const stats = ok(await s.stats(), 'stats');
  assert.ok(stats.retries >= 1, `the attempt on the silent connection failed and was retried: ${JSON.stringify({ retries: stats.retries, failures: stats.failures })}`);
  ok(await s.append('end.'), 'append');
  const closed = ok(await s.close(), 'close');
  assert.equal(closed.status, 'complete');
  const { row, chunks } = rows(stack, s.id);
  assert.equal(row.status, 'complete');
  assert.equal(row.body, 'before after 🕳️ end.', 'every appended character, once');
  assert.equal(chunks.length, 0, 'compacted');
});
