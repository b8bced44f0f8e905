// Self-test of the e2e harness (tests/e2e/harness.mjs): token minting, stack start/stop,
// crash + restart on the same state, and direct D1 access in both directions against the
// real Worker. Skips the stack parts when the Worker has not been built.
import test from 'node:test';
import assert from 'node:assert/strict';
import { decodeToken, groupAlive, mintToken, startStack, TEST_SECRET, verifyToken } from './harness.mjs';

test('mintToken: valid HS256 token with sub, stream, scope, exp', () => {
  const tok = mintToken({ sub: 'u1', stream: 'chat-*', scope: ['read', 'write'] });
  const claims = verifyToken(tok, TEST_SECRET);
  assert.equal(claims.sub, 'u1');
  assert.equal(claims.stream, 'chat-*');
  assert.equal(claims.scope, 'read write');
  assert.ok(claims.exp > Date.now() / 1000);
  assert.deepEqual(decodeToken(tok).header, { alg: 'HS256', typ: 'JWT' });
});

test('mintToken: deliberately bad tokens fail verification', () => {
  const bad = {
    none: mintToken({ stream: 'm1', alg: 'none' }),
    wrongKey: mintToken({ stream: 'm1' }, 'not-the-secret'),
    expired: mintToken({ stream: 'm1', exp: Math.floor(Date.now() / 1000) - 60 }),
    tampered: mintToken({ stream: 'm1', scope: 'read', tamper: true }),
  };
  assert.match(bad.none, /\.$/, 'alg none has an empty signature');
  for (const [name, tok] of Object.entries(bad)) assert.throws(() => verifyToken(tok, TEST_SECRET), undefined, name);
});

test('stack: start, D1 both ways, crash and restart on the same state', { timeout: 180_000 }, async (t) => {
  const stack = await startStack({ name: 'harness-selftest' });
  t.after(() => stack.stop());
  assert.match(stack.baseUrl, /^http:\/\/127\.0\.0\.1:\d+$/);
  assert.equal(stack.secret, TEST_SECRET);

  // The harness answers HTTP and sees the migrated schema.
  const root = await fetch(`${stack.baseUrl}/`);
  await root.arrayBuffer();
  assert.ok(root.status > 0);
  const tables = stack.db.all(`SELECT name FROM sqlite_master WHERE type = 'table'`).map((r) => r.name);
  assert.ok(tables.includes('messages') && tables.includes('message_chunks'), `tables: ${tables}`);

  const id = 'harness-m1';
  const read = { authorization: `Bearer ${stack.token(id, 'read')}` };
  const write = { authorization: `Bearer ${stack.token(id, 'write')}` };

  // Node → Worker: a row inserted here is what GET /text reads (SPEC §4: 404 no_row before).
  const before = await fetch(`${stack.baseUrl}/streams/${id}/text`, { headers: read });
  assert.equal(before.status, 404, await before.text());
  stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES (?, 'c1', 'assistant')`, id);
  const after = await fetch(`${stack.baseUrl}/streams/${id}/text`, { headers: read });
  const body = await after.text();
  assert.equal(after.status, 200, body);
  assert.equal(JSON.parse(body).text, '');

  // Worker → Node: POST /open marks the row streaming (SPEC §5), visible here at once.
  const open = await fetch(`${stack.baseUrl}/streams/${id}/open`, { method: 'POST', headers: write });
  assert.equal(open.status, 200, await open.text());
  assert.equal(stack.db.get(`SELECT status FROM messages WHERE id = ?`, id).status, 'streaming');

  // Crash (SIGKILL of the whole group), then restart on the same state and port.
  const pgid = stack.process.pgid;
  await stack.kill();
  assert.equal(groupAlive(pgid), false, 'kill() leaves no wrangler/workerd process behind');
  await assert.rejects(fetch(`${stack.baseUrl}/`), 'nothing listens after kill()');
  await stack.restart();
  const again = await fetch(`${stack.baseUrl}/streams/${id}/text`, { headers: read });
  assert.equal(again.status, 200, await again.text());
  assert.equal(stack.db.get(`SELECT count(*) AS n FROM messages WHERE id = ?`, id).n, 1);

  await stack.stop();
  assert.equal(groupAlive(stack.process.pgid), false, 'stop() leaves no process behind');
});
