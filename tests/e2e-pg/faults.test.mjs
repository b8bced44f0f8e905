// The Postgres backend's faults against a real server (the cluster of scripts/pg.sh, the Worker
// reaching it through wrangler's local Hyperdrive): the Worker's connection killed in the middle
// of a checkpoint (pg_terminate_backend while the checkpoint waits on a row lock the test holds),
// Postgres restarted mid-answer, a statement timeout, Postgres down when a stream opens (503).
// Each loses nothing, half-writes nothing, and leaves no row `streaming`.
//
// Between wrangler and Postgres sits a TCP relay of the tests' own (relay.mjs: it forwards bytes):
// while Postgres is down it answers as a server shutting down does. It was built for wrangler
// 4.86, whose Hyperdrive proxy crashed the whole `wrangler dev` on a refused or reset connection;
// 4.164 survives those (docs/TOOLCHAIN.md, "The runtime"), and the relay stays as the realistic
// shape of a database going away.
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { join } from 'node:path';
import { ROOT, startStack } from '../e2e/harness.mjs';
import { PSQL, clusterUrl } from '../e2e/pg.mjs';
import { api, isError, newStream, ok, rows, until } from '../e2e/util.mjs';
import { startRelay, via } from './relay.mjs';

const PG_SH = join(ROOT, 'scripts', 'pg.sh');
let stack;
let relay;

/** scripts/pg.sh on the cluster RINDLE_PG_URL names (PG_DIR must be that cluster's: test.sh sets both). */
function pgSh(command) {
  return execFileSync(PG_SH, [command], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
}

/** The pids of the Worker's connections to the stack's database for which `where` holds. */
const workerBackends = (where = 'true') =>
  stack.db
    .all(`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name <> 'e2e-lock' AND ${where}`)
    .map((r) => r.pid);

/** Terminates those backends (one statement each: a WHERE clause may evaluate its terms in any order). */
const terminate = (pids) => pids.filter((pid) => stack.db.get(`SELECT pg_terminate_backend(${Number(pid)}) AS done`).done).length;

/** Holds row `id`'s lock in a psql session of its own until release(). */
async function holdRowLock(id) {
  const session = spawn(PSQL, ['-X', '-q', '-A', '-t', '-d', stack.db.url], { stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, PGAPPNAME: 'e2e-lock' } });
  let out = '';
  session.stdout.on('data', (d) => (out += d));
  session.stdin.write(`BEGIN; SELECT id FROM messages WHERE id = '${id}' FOR UPDATE; SELECT 'locked';\n`);
  await until(() => out.includes('locked'), 'the test to hold the row lock');
  return {
    release: () => new Promise((resolve) => {
      session.on('exit', resolve);
      session.stdin.end('ROLLBACK;\n');
    }),
  };
}

/** The row holds exactly `text`, sealed `status`, one chunk row per slice and none overlapping. */
function assertSealed(id, text, status = 'complete') {
  const { row, chunks } = rows(stack, id);
  assert.equal(row.status, status, `row ${id} sealed ${status}`);
  assert.equal(row.body, text, 'the body is every appended character, once');
  assert.equal(Number(row.seq), text.length, 'seq is the body length');
  assert.equal(chunks.length, 0, 'compaction removed the chunk rows');
}

test.before(async () => {
  const url = new URL(clusterUrl());
  assert.equal(new URL(pgSh('url')).port, url.port, `scripts/pg.sh (PG_DIR=${process.env.PG_DIR ?? '.wrangler/pg'}) must run the cluster of RINDLE_PG_URL`);
  relay = await startRelay(Number(url.port));
  // Retries: 3, doubling from 50 ms (the default), so a checkpoint gives up within ~0.4 s.
  stack = await startStack({ name: 'e2e-pg-faults', backend: 'postgres', pgVia: via(relay.port), vars: { CHECKPOINT_CHARS: '100000', CHECKPOINT_INTERVAL_MS: '60000', LEASE_MS: '2000' } });
});
test.after(async () => {
  await stack?.stop();
  relay?.close();
});

test('the connection killed in the middle of a checkpoint: rolled back, reconnected, retried; nothing lost or doubled', { timeout: 60_000 }, async () => {
  const s = api(stack, newStream(stack, 'pg-kill'));
  ok(await s.open(), 'open');
  ok(await s.append('before '), 'append');
  assert.equal(ok(await s.flush(), 'flush').durableSeq, 7);
  const lock = await holdRowLock(s.id);
  ok(await s.append('during 🧱'), 'append');
  const flushed = s.flush();
  // The checkpoint's CAS waits on the lock: it is in the middle of its transaction.
  await until(() => workerBackends(`wait_event_type = 'Lock'`).length === 1, 'the checkpoint to wait on the row lock');
  assert.equal(terminate(workerBackends(`wait_event_type = 'Lock'`)), 1, 'the Worker\'s connection was terminated mid-checkpoint');
  await lock.release();
  const after = ok(await flushed, 'flush (retried on a new connection)');
  assert.equal(after.durableSeq, 16);
  const stats = ok(await s.stats(), 'stats');
  assert.ok(stats.retries >= 1 && stats.postgres.rounds > 0, `the failed attempt was retried: ${JSON.stringify(stats)}`);
  const { row, chunks } = rows(stack, s.id);
  assert.equal(Number(row.seq), 16);
  assert.deepEqual(chunks.map((c) => c.text), ['before ', 'during 🧱'], 'each slice once');
  ok(await s.close(), 'close');
  assertSealed(s.id, 'before during 🧱');
});

test('a statement timeout: the checkpoint fails whole (503 checkpoint_failed, the row unchanged), then recovers', { timeout: 60_000 }, async () => {
  const s = api(stack, newStream(stack, 'pg-timeout'));
  ok(await s.open(), 'open');
  ok(await s.append('kept '), 'append');
  ok(await s.flush(), 'flush');
  // New connections of the Worker time statements out at 200 ms; end the current one.
  stack.db.run(`ALTER ROLE rindle IN DATABASE ${JSON.stringify(new URL(stack.db.url).pathname.slice(1))} SET statement_timeout = '200ms'`);
  try {
    terminate(workerBackends());
    const lock = await holdRowLock(s.id);
    ok(await s.append('late'), 'append');
    const res = await s.flush();
    const body = isError(res, 503, 'checkpoint_failed', 'flush whose statements time out');
    assert.equal(body.durableSeq, 5);
    await lock.release();
    assert.equal(Number(rows(stack, s.id).row.seq), 5, 'the row did not advance');
  } finally {
    stack.db.run(`ALTER ROLE rindle IN DATABASE ${JSON.stringify(new URL(stack.db.url).pathname.slice(1))} RESET statement_timeout`);
  }
  assert.equal(ok(await s.flush(), 'flush after').durableSeq, 9);
  ok(await s.close(), 'close');
  assertSealed(s.id, 'kept late');
});

test('Postgres restarted mid-answer: checkpoints fail while it is down (503), nothing half-written; after it is back the answer completes whole', { timeout: 90_000 }, async () => {
  const s = api(stack, newStream(stack, 'pg-restart'));
  ok(await s.open(), 'open');
  ok(await s.append('one '), 'append');
  ok(await s.flush(), 'flush');
  pgSh('stop');
  try {
    ok(await s.append('two '), 'append while Postgres is down');
    isError(await s.flush(), 503, 'checkpoint_failed', 'flush while Postgres is down');
    ok(await s.append('three'), 'append while Postgres is down');
  } finally {
    pgSh('start');
  }
  assert.equal(ok(await s.flush(), 'flush after the restart').durableSeq, 13);
  ok(await s.close(), 'close');
  assertSealed(s.id, 'one two three');
});

test('Postgres down when a stream opens: 503, the row untouched; the open succeeds once it is back', { timeout: 90_000 }, async () => {
  const s = api(stack, newStream(stack, 'pg-down-open'));
  pgSh('stop');
  let refused;
  try {
    refused = await s.open();
  } finally {
    pgSh('start');
  }
  isError(refused, 503, 'store_unavailable', 'open with Postgres down');
  const { row } = rows(stack, s.id);
  assert.equal(row.status, 'pending', 'the row was never marked');
  ok(await s.open(), 'open once Postgres is back');
  ok(await s.append('hello'), 'append');
  ok(await s.close(), 'close');
  assertSealed(s.id, 'hello');
});

test('no row is left streaming', () => {
  assert.deepEqual(stack.db.all(`SELECT id FROM messages WHERE status = 'streaming'`), []);
});
