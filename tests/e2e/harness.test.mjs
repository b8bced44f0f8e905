// Self-test of the e2e harness (tests/e2e/harness.mjs): token minting, stack start/stop,
// crash + restart on the same state, and direct D1 access in both directions against the
// real Worker; and of util.mjs's cutting proxy, against an SSE server of its own: each cut
// forwards exactly the bytes up to its planned place.
import test from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { decodeToken, groupAlive, mintToken, startStack, TEST_SECRET, verifyToken } from './harness.mjs';
import { planCuts, rng, seedFromEnv, startProxy } from './util.mjs';

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

test('the proxy cuts each SSE answer exactly at its planned place: after event k, or inside the next block', async (t) => {
  const seed = seedFromEnv();
  t.diagnostic(`seed ${seed} (E2E_SEED=${seed} replays it)`);
  const r = rng(seed);
  // The answer: a retry block, then events with ids, a ping comment now and then, and one
  // short event; written in small pieces, so blocks and lines span the proxy's reads.
  const blocks = ['retry: 50\n\n'];
  for (let n = 1; n <= 40; n++) {
    if (r.chance(0.2)) blocks.push(': ping\n\n');
    blocks.push(n === 7 ? 'data:x\n\n' : `id: ${n}\ndata: {"n":${n},"text":"é😀 ${'z'.repeat(r.int(0, 30))}"}\n\n`);
  }
  const body = Buffer.from(blocks.join(''));
  const server = http.createServer(async (req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (let i = 0; i < body.length;) {
      const j = Math.min(body.length, i + r.int(1, 25));
      await new Promise((resolve) => res.write(body.subarray(i, j), resolve));
      i = j;
    }
    // Left open, as a live stream is: only the cut ends it.
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  const plan = [
    { afterEvent: 2, intoNext: 0 },
    { afterEvent: 6, intoNext: 3 }, // inside event 7, the short one, or a ping before it
    { afterEvent: 6, intoNext: 500 }, // longer than the next block: cut before its last byte
    ...planCuts(r, { cuts: 3, budget: 39 }),
  ];
  const proxy = await startProxy(`http://127.0.0.1:${server.address().port}`, { cuts: plan });
  t.after(() => proxy.close());

  // The oracle, from the blocks: where the k-th event block ends, and the block after it.
  const text = body.toString('latin1');
  const ends = [];
  for (let at = 0, i = 0; i < blocks.length; i++) {
    at += Buffer.byteLength(blocks[i]);
    if (/^data|\ndata/.test(blocks[i])) ends.push({ at, next: blocks[i + 1] && Buffer.byteLength(blocks[i + 1]) });
  }
  for (const [i, cut] of plan.entries()) {
    const got = await new Promise((resolve) => {
      const chunks = [];
      http.get(`${proxy.url}/sse`, (res) => {
        res.on('data', (c) => chunks.push(c));
        res.on('error', () => resolve(Buffer.concat(chunks)));
        res.on('close', () => resolve(Buffer.concat(chunks)));
      }).on('error', () => resolve(Buffer.concat(chunks)));
    });
    const { at, next } = ends[cut.afterEvent - 1];
    const want = at + Math.min(cut.intoNext, next - 1);
    assert.equal(got.toString('latin1'), text.slice(0, want), `cut ${i + 1} ${JSON.stringify(cut)}: the client got exactly the bytes before it`);
    assert.equal(proxy.cuts, i + 1);
    const lastId = text.slice(0, at).match(/id: (\d+)\n(?!.*id: )/s)?.[1];
    assert.deepEqual(proxy.cutLog[i], { url: '/sse', ...cut, events: cut.afterEvent, lastId }, `cut ${i + 1}: its record`);
  }
  await proxy.allCut;
});
