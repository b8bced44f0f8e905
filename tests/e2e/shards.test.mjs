// Beyond one database (SPEC §13): two local D1 databases, `DB` and `DB_EU`, with
// DATABASES = {"default": "DB", "eu": "DB_EU"}: an id `eu:…` lives in DB_EU, any other in DB
// (on Postgres, RINDLE_E2E_BACKEND=postgres: `HYPERDRIVE` and `HYPERDRIVE_EU`, two databases).
// Every path of an answer follows its id: the open (the row read and marked there), its
// checkpoints and seal (the rows written there, and only there), the lease's revival after a
// kill (the rebuild reads and claims the row there), /text and /ui from the row (read there
// once the stream retired), and a chat's reads (the resume GET of a chat `eu:…` finds its answer
// there, and its feed is rebuilt from the rows there). An id naming a database that is not configured is 400 `unknown_database` on every route,
// JSON, nothing written anywhere.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { mintToken, readSse, startStack } from './harness.mjs';
import { api, call, isError, ok, uniqueId, until } from './util.mjs';

let stack;
const LINGER_MS = 1500;

before(async () => {
  stack = await startStack({ name: 'shards', databases: ['eu'], vars: { LINGER_MS: String(LINGER_MS), LEASE_MS: '2000', RESUME_WINDOW_MS: '60000' } });
});

after(async () => {
  await stack?.stop();
});

/** The app's insert of the row of `id` into database `db` (the tests' direct SQL). */
const insert = (db, id, chat = 'c1') => stack.dbs[db].run(`INSERT INTO messages (id, chat_id, role) VALUES (?, ?, 'assistant')`, id, chat);
const rowIn = (db, id) => stack.dbs[db].get('SELECT * FROM messages WHERE id = ?', id);
const chunksIn = (db, id) => stack.dbs[db].all('SELECT * FROM message_chunks WHERE streamId = ?', id);

/** A producer call with its epoch (SPEC §10). */
const write = (c, action, body, epoch) =>
  call(c.url(action), { method: 'POST', headers: { authorization: `Bearer ${c.token}`, 'x-rindle-epoch': String(epoch), 'content-type': 'text/plain' }, body });

test('an answer whose id names a database lives there: open, checkpoints, seal, /text, /ui from the row, the chat lookup', { timeout: 90_000 }, async () => {
  const euId = `eu:${uniqueId('a')}`;
  const homeId = uniqueId('home');
  insert('eu', euId, 'eu:chat-1');
  insert('default', homeId);
  const [e, h] = [api(stack, euId), api(stack, homeId)];
  ok(await e.open(undefined, 'ui'), 'open in DB_EU');
  ok(await h.open(), 'open in DB');
  // While it streams, the chat's resume GET finds it in its own database.
  const chatToken = mintToken({ sub: 'u', scope: 'read', claims: { chat: 'eu:chat-1' } }, stack.secret);
  const lookup = await readSse(`${stack.baseUrl}/streams/chats/${encodeURIComponent('eu:chat-1')}/stream?token=${encodeURIComponent(chatToken)}`);
  assert.equal(lookup.status, 200, 'the chat lookup found its answer in DB_EU');
  lookup.close();
  const lines = [{ type: 'start' }, { type: 'text-delta', id: 't', delta: 'Grüße 👋' }, { type: 'finish' }].map((l) => JSON.stringify(l) + '\n').join('');
  ok(await call(e.url('append'), { method: 'POST', headers: { authorization: `Bearer ${e.token}`, 'content-type': 'application/x-ndjson' }, body: lines }));
  ok(await e.flush(), 'a checkpoint in DB_EU');
  ok(await h.append('at home'));
  ok(await h.flush());
  assert.equal(rowIn('eu', euId).seq, lines.length, 'the checkpoint moved the row in DB_EU');
  assert.equal(rowIn('default', euId), undefined, 'and nothing of it is in DB');
  assert.equal(rowIn('eu', homeId), undefined, 'nothing of the other answer is in DB_EU');
  assert.ok(chunksIn('eu', euId).length > 0 && chunksIn('default', euId).length === 0, 'its chunk rows are in DB_EU only');
  assert.equal(ok(await e.close()).status, 'complete');
  ok(await h.close());
  const sealed = rowIn('eu', euId);
  assert.deepEqual([sealed.status, sealed.body, chunksIn('eu', euId).length], ['complete', lines, 0], 'sealed and compacted in DB_EU');
  assert.equal(rowIn('default', homeId).status, 'complete');
  // Once the stream retired from its object, /text and /ui read the row, in DB_EU.
  await until(async () => (await e.stats()).status === 404, 'the stream to retire from its object', LINGER_MS + 10_000);
  const text = ok(await e.text(), '/text');
  assert.deepEqual([text.text, text.status], [lines, 'complete'], '/text from DB_EU');
  const ui = await readSse(e.uiUrl(0));
  await ui.done;
  const data = ui.frames.filter((f) => f.data !== undefined).map((f) => f.data);
  assert.ok(data.includes(JSON.stringify({ type: 'text-delta', id: 't', delta: 'Grüße 👋' })) && data.at(-1) === '[DONE]', `/ui from the row: ${JSON.stringify(data)}`);
});

test('the revival rebuilds an answer from its own database after a kill, and it completes there', { timeout: 120_000 }, async () => {
  const id = `eu:${uniqueId('revive')}`;
  insert('eu', id);
  const c = api(stack, id);
  ok(await c.open());
  ok(await c.append('before the kill, '));
  ok(await c.flush());
  await stack.kill();
  await stack.restart();
  // The producer resumes the rebuilt stream (its read and claim of the row were in DB_EU).
  const granted = ok(await write(c, 'resume', undefined, 1), 'resume');
  assert.equal(granted.seq, 'before the kill, '.length, 'rebuilt at the durable text DB_EU holds');
  ok(await write(c, 'append', 'after it.', granted.epoch));
  const closed = ok(await write(c, 'close', undefined, granted.epoch));
  assert.equal(closed.status, 'complete');
  const row = rowIn('eu', id);
  assert.deepEqual([row.status, row.body], ['complete', 'before the kill, after it.']);
  assert.equal(rowIn('default', id), undefined);
});

test('a chat\'s feed is rebuilt from its own database: an answer streaming there that it never heard of is announced, not one in another database', { timeout: 60_000 }, async () => {
  const chat = `eu:${uniqueId('chat')}`;
  const [there, elsewhere] = [`eu:${uniqueId('a')}`, uniqueId('a')];
  // Streaming without any notice (as if every notice of its object was lost), one row in each.
  stack.dbs.eu.run(`INSERT INTO messages (id, chat_id, role, status) VALUES (?, ?, 'assistant', 'streaming')`, there, chat);
  stack.dbs.default.run(`INSERT INTO messages (id, chat_id, role, status) VALUES (?, ?, 'assistant', 'streaming')`, elsewhere, chat);
  const token = mintToken({ sub: 'u', scope: 'read', claims: { chat } }, stack.secret);
  const feed = await readSse(`${stack.baseUrl}/streams/chats/${encodeURIComponent(chat)}/events?token=${encodeURIComponent(token)}`);
  assert.equal(feed.status, 200);
  const start = await feed.next((f) => f.json?.type === 'start');
  assert.equal(start.json.streamId, there, 'announced from DB_EU');
  await new Promise((r) => setTimeout(r, 500));
  assert.deepEqual(feed.frames.filter((f) => f.json?.type === 'start').map((f) => f.json.streamId), [there], 'the row in DB is not its chat\'s');
  feed.close();
});

test('an id naming a database that is not configured is 400 unknown_database on every route, nothing written', { timeout: 60_000 }, async () => {
  const id = `us:${uniqueId('nowhere')}`;
  const c = api(stack, id);
  const before = [stack.dbs.default.all('SELECT id, status FROM messages'), stack.dbs.eu.all('SELECT id, status FROM messages')];
  for (const [what, res] of [
    ['open', await c.open()],
    ['append', await c.append('x')],
    ['flush', await c.flush()],
    ['close', await c.close()],
    ['text', await c.text()],
    ['events', await call(c.eventsUrl(0))],
  ]) {
    const body = isError(res, 400, 'unknown_database', what);
    assert.match(body.message, /"us"/, `${what}: names the database`);
  }
  const chatToken = mintToken({ sub: 'u', scope: 'read', claims: { chat: 'us:chat' } }, stack.secret);
  isError(await call(`${stack.baseUrl}/streams/chats/${encodeURIComponent('us:chat')}/stream?token=${encodeURIComponent(chatToken)}`), 400, 'unknown_database', 'chat lookup');
  // Authorization still comes first: no token, the same 403 as anywhere.
  isError(await call(c.url('open'), { method: 'POST' }), 403, 'forbidden', 'open without a token');
  assert.deepEqual([stack.dbs.default.all('SELECT id, status FROM messages'), stack.dbs.eu.all('SELECT id, status FROM messages')], before, 'nothing written');
});
