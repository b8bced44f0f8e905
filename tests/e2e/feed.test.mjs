// A chat's feed (SPEC §11) over raw HTTP against the real runtime: `GET /streams/chats/{chat}/events`
// read with the tests' SSE reader (eventsource-parser), answers opened with `{chat: {id,
// userMessage}}` by a raw producer.
//
// - a turn is announced in order (the user message, the start, the end with the row's status and
//   length), every event with an `id:`; a reconnect with `Last-Event-ID` (or `?after=`) gets exactly
//   the events after it, one with a foreign or unreadable id is told `reload` and gets the history;
// - bad input: an unknown chat is an empty feed, answered exactly as a known one is; another
//   chat's token, a stream's token, no token: the same 403; a user message that is not a user
//   UIMessage, or over 64 KiB, a bad chat id, or a chat the row does not belong to: a 4xx, the row
//   untouched, and nothing announced (the next event the feed carries is the next good turn's);
// - a user message is checked as the AI SDK's own validateUIMessages checks it (what it refuses is
//   refused; the user messages it accepts are announced);
// - the message table is the truth: an answer `streaming` the feed never heard of is announced
//   when the feed object loads, and its end is read from its row while it is in flight;
// - a reset of the runtime mid-answer (SIGKILL): the reader reconnects with its `Last-Event-ID`,
//   the producer resumes and closes, and the reader ends with each event exactly once.
//
// Runs on D1, and on Postgres with RINDLE_E2E_BACKEND=postgres (scripts/test.sh's Postgres pass).
import test from 'node:test';
import assert from 'node:assert/strict';
import { mintToken, startStack } from './harness.mjs';
import { api, call, followFeed, isError, ndjson, ok, uniqueId, withTimeout } from './util.mjs';

const LEASE_MS = 1000;

let stack;
test.before(async () => {
  stack = await startStack({ name: 'e2e-feed', vars: { LEASE_MS: String(LEASE_MS), CHECKPOINT_INTERVAL_MS: '200' } });
});
test.after(async () => {
  await stack?.stop();
});

const chatToken = (chat, { exp } = {}) => mintToken({ sub: 'u', scope: 'read', exp, claims: { chat } }, stack.secret);
const feedUrl = (chat, query = '') => `${stack.baseUrl}/streams/chats/${encodeURIComponent(chat)}/events${query}`;

/** A feed reader: resolves once its replay's `ready` arrived (`util.followFeed`). */
const follow = (chat, { token = chatToken(chat), after, lastEventId } = {}) =>
  followFeed(feedUrl(chat, `?token=${encodeURIComponent(token)}${after === undefined ? '' : `&after=${encodeURIComponent(after)}`}`), { lastEventId });

/** An answer's row in `chat`, and its API client. */
function answer(chat) {
  const id = uniqueId('a');
  stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES (?, ?, 'assistant')`, id, chat);
  return api(stack, id);
}

const userMessage = (id, text = 'What is the weather in 東京? 👍🏽') => ({ id, role: 'user', parts: [{ type: 'text', text }], metadata: { at: 1 } });

/** `POST open` of a `ui` stream naming `chat` (and what `body` adds to the chat). */
const openIn = (c, chat, body = {}) =>
  call(c.url('open'), {
    method: 'POST',
    headers: { authorization: `Bearer ${c.token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ format: 'ui', chat: { id: chat, ...body } }),
  });

const LINES = ndjson([{ type: 'start' }, { type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: 'Sunny 👋' }, { type: 'text-end', id: 't' }, { type: 'finish' }]);

test('a turn is announced in order with ids; a reconnect gets exactly what it missed', async () => {
  const chat = uniqueId('chat');
  const reader = await follow(chat);
  assert.deepEqual(reader.events, [], 'a chat with no turn yet: nothing but ready');
  const c = answer(chat);
  const question = userMessage('u-1');
  ok(await openIn(c, chat, { userMessage: question }), 'open');
  const user = await reader.next('user');
  assert.deepEqual({ ...user, id: undefined }, { id: undefined, type: 'user', streamId: c.id, message: question });
  const start = await reader.next('start');
  assert.deepEqual({ ...start, id: undefined }, { id: undefined, type: 'start', streamId: c.id, messageId: c.id, format: 'ui' });
  ok(await c.append(LINES), 'append');
  ok(await c.close(), 'close');
  const end = await reader.next('end');
  const row = stack.db.get('SELECT status, seq FROM messages WHERE id = ?', c.id);
  assert.deepEqual({ ...end, id: undefined }, { id: undefined, type: 'end', streamId: c.id, status: 'complete', durableSeq: row.seq });
  assert.equal(row.status, 'complete');
  const ids = [user.id, start.id, end.id];
  const [generation] = ids[0].split('-');
  assert.deepEqual(ids, [1, 2, 3].map((n) => `${generation}-${n}`), 'numbered in order within one generation');
  reader.close();

  // Reconnects: Last-Event-ID (what EventSource sends) wins over ?after=.
  for (const [i, id] of ids.entries()) {
    const again = await follow(chat, { lastEventId: id, after: 'junk' });
    assert.deepEqual(again.events.map((e) => e.id), ids.slice(i + 1), `after ${id}`);
    again.close();
  }
  const byQuery = await follow(chat, { after: user.id });
  assert.deepEqual(byQuery.events.map((e) => e.type), ['start', 'end'], '?after= without the header');
  byQuery.close();
  for (const lost of [`${Number(generation) + 1}-1`, `${generation}-99`, 'junk']) {
    const told = await follow(chat, { lastEventId: lost });
    assert.deepEqual(told.events.map((e) => e.type), ['reload', 'user', 'start', 'end'], `${lost}: reload, then the history`);
    told.close();
  }
});

test('bad input: an unknown chat is an empty feed, another chat\'s token 403, a bad or oversized user message 400 and nothing announced', async () => {
  // An unknown chat: the same answer as any chat with no turn; the same 403 for every denial.
  const unknown = await follow(uniqueId('never'));
  assert.deepEqual(unknown.events, []);
  assert.equal(unknown.sse.headers.get('content-type'), 'text/event-stream; charset=utf-8');
  unknown.close();
  const chat = uniqueId('chat');
  const denied = [
    ['another chat', `?token=${encodeURIComponent(chatToken('other-chat'))}`],
    ['a prefix of another chat', `?token=${encodeURIComponent(chatToken('other*'))}`],
    ['a stream token', `?token=${encodeURIComponent(stack.token('s1', 'read'))}`],
    ['an expired token', `?token=${encodeURIComponent(chatToken(chat, { exp: 1 }))}`],
    ['no token', ''],
  ];
  for (const [what, query] of denied) isError(await call(feedUrl(chat, query)), 403, 'forbidden', what);
  isError(await call(`${stack.baseUrl}/streams/chats/a%2Fb/events`), 400, 'bad_chat_id', 'a bad chat id in the path');

  const reader = await follow(chat);
  const refused = [
    [{ userMessage: { id: 'u', role: 'assistant', parts: [{ type: 'text', text: 'x' }] } }, 400, 'bad_user_message'],
    [{ userMessage: { id: 'u', role: 'user', parts: [] } }, 400, 'bad_user_message'],
    [{ userMessage: { id: 'u', role: 'user', parts: [{ type: 'text' }] } }, 400, 'bad_user_message'],
    [{ userMessage: 'hello' }, 400, 'bad_user_message'],
    [{ userMessage: userMessage('u', 'x'.repeat(70_000)) }, 400, 'bad_user_message'],
    [{ id: 'a/b' }, 400, 'bad_chat_id'],
  ];
  for (const [body, status, code] of refused) {
    const c = answer(chat);
    const res = await openIn(c, chat, body);
    const e = isError(res, status, code, JSON.stringify(body).slice(0, 80));
    if (JSON.stringify(body).length > 65_536) assert.equal(e.maxBytes, 65_536);
    assert.equal(stack.db.get('SELECT status FROM messages WHERE id = ?', c.id).status, 'pending', 'nothing opened');
  }
  // A row of another chat: refused by the row, nothing opened.
  const foreign = uniqueId('a');
  stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES (?, 'someone-else', 'assistant')`, foreign);
  isError(await openIn(api(stack, foreign), chat, { userMessage: userMessage('u-x') }), 409, 'open_refused', 'a row of another chat');
  assert.equal(stack.db.get('SELECT status FROM messages WHERE id = ?', foreign).status, 'pending');
  // Nothing was announced: the next events are the next good turn's.
  const good = answer(chat);
  ok(await openIn(good, chat, { userMessage: userMessage('u-good') }), 'a good open');
  const first = await reader.next('user');
  assert.equal(first.message.id, 'u-good');
  await reader.next('start');
  assert.deepEqual(reader.events.map((e) => `${e.type} ${e.streamId}`), [`user ${good.id}`, `start ${good.id}`], 'nothing before it');
  ok(await good.close(), 'close');
  await reader.next('end');
  reader.close();
});

test('the message table is the truth: an answer the feed never heard of is announced, and its end read from its row', async () => {
  const chat = uniqueId('chat');
  const id = uniqueId('a');
  // Streaming without any notice (as if every notice of its object was lost).
  stack.db.run(`INSERT INTO messages (id, chat_id, role, status) VALUES (?, ?, 'assistant', 'streaming')`, id, chat);
  const reader = await follow(chat);
  const start = await reader.next('start');
  assert.deepEqual({ ...start, id: undefined }, { id: undefined, type: 'start', streamId: id, messageId: id }, 'from the row: no format, no user message');
  stack.db.run(`UPDATE messages SET status = 'interrupted', seq = 7 WHERE id = ?`, id);
  const t0 = Date.now();
  const end = await reader.next('end', 3 * LEASE_MS + 10_000);
  assert.deepEqual({ ...end, id: undefined }, { id: undefined, type: 'end', streamId: id, status: 'interrupted', durableSeq: 7 });
  assert.ok(Date.now() - t0 <= 3 * LEASE_MS + 5_000, 'read back every 3 leases while in flight');
  reader.close();
});

test('a user message is checked as the AI SDK checks it: what its validateUIMessages refuses is refused, a user message it accepts is announced', async () => {
  const { safeValidateUIMessages } = await import('ai');
  const chat = uniqueId('chat');
  const text = (t) => ({ type: 'text', text: t });
  const cases = [
    userMessage('ok-text'),
    { id: 'ok-parts', role: 'user', parts: [text('a'), { type: 'file', mediaType: 'image/png', url: 'data:image/png;base64,AA==', filename: 'x.png' }, { type: 'data-weather', data: { city: 'Tokyo' } }] },
    { id: 'ok-state', role: 'user', parts: [{ type: 'text', text: 'a', state: 'done' }], metadata: { n: 1 } },
    { id: 'ok-source', role: 'user', parts: [{ type: 'source-url', sourceId: 's', url: 'https://example.com' }, { type: 'step-start' }] },
    { id: 'bad-no-parts', role: 'user', parts: [] },
    { id: 'bad-no-text', role: 'user', parts: [{ type: 'text' }] },
    { id: 'bad-text-number', role: 'user', parts: [{ type: 'text', text: 7 }] },
    { id: 'bad-file', role: 'user', parts: [{ type: 'file', url: 'x' }] },
    { id: 'bad-type', role: 'user', parts: [{ type: 'picture' }] },
    { id: 'bad-role', role: 'robot', parts: [text('a')] },
    { role: 'user', parts: [text('no id')] },
    { id: 'bad-part', role: 'user', parts: ['hello'] },
  ];
  for (const message of cases) {
    const sdk = (await safeValidateUIMessages({ messages: [message] })).success;
    const c = answer(chat);
    const res = await openIn(c, chat, { userMessage: message });
    const accepted = res.status === 200;
    if (!sdk) assert.equal(accepted, false, `${JSON.stringify(message)}: the SDK refuses it, so must the feed (${res.status} ${res.raw})`);
    else assert.equal(accepted, true, `${JSON.stringify(message)}: a user message the SDK accepts (${res.status} ${res.raw})`);
    if (accepted) ok(await c.close(), 'close');
    else isError(res, 400, 'bad_user_message', JSON.stringify(message));
  }
});

// Last: it kills the runtime.
test('a read made for a chat asks the row once: the answer\'s chat is remembered, another chat is asked again', async () => {
  // The row is moved to another chat behind the Worker's back (no app does: it is how the test
  // sees whether the store was asked). A remembered membership is not asked again; a read for a
  // chat it does not remember is, and then the row's word is what counts.
  const chat = uniqueId('chat');
  const moved = uniqueId('moved');
  const c = answer(chat);
  const read = (asChat) => call(`${c.url('text')}?chat=${encodeURIComponent(asChat)}&token=${encodeURIComponent(chatToken(asChat))}`);
  const first = await read(chat);
  assert.notEqual(first.status, 403, `the row says ${chat}: ${first.raw}`);
  stack.db.run('UPDATE messages SET chat_id = ? WHERE id = ?', moved, c.id);
  const again = await read(chat);
  assert.notEqual(again.status, 403, `remembered, the row not asked again: ${again.raw}`);
  const other = await read(moved);
  assert.notEqual(other.status, 403, `a chat not remembered is asked of the row, which now says ${moved}: ${other.raw}`);
  isError(await read(chat), 403, 'forbidden', 'the row asked again (its answer remembered for another chat now) says no');
});

test('a reset mid-answer: the reader reconnects with its Last-Event-ID and gets each event exactly once', async () => {
  const chat = uniqueId('chat');
  const reader = await follow(chat);
  const c = answer(chat);
  const opened = ok(await openIn(c, chat, { userMessage: userMessage('u-r') }), 'open');
  await reader.next('start');
  ok(await c.append(LINES.slice(0, 40)), 'append');
  ok(await c.flush(), 'flush');
  const lastId = reader.events.at(-1).id;
  await stack.kill();
  await stack.restart();
  // The producer resumes (SPEC §10) and finishes.
  // With the open's epoch: a resume without one (a caller that wrote nothing) is refused.
  const resumed = ok(await call(c.url('resume'), { method: 'POST', headers: { authorization: `Bearer ${c.token}`, 'x-rindle-epoch': String(opened.epoch) } }), 'resume');
  const again = await follow(chat, { lastEventId: lastId });
  assert.deepEqual(again.events, [], 'nothing new yet, nothing repeated');
  const epoch = { 'x-rindle-epoch': String(resumed.epoch), authorization: `Bearer ${c.token}` };
  await fetch(c.url('append'), { method: 'POST', headers: epoch, body: LINES.slice(resumed.seq) }).then((r) => assert.equal(r.status, 200));
  await fetch(c.url('close'), { method: 'POST', headers: epoch }).then((r) => assert.equal(r.status, 200));
  const end = await again.next('end');
  assert.equal(end.status, 'complete');
  const all = [...reader.events, ...again.events].map((e) => `${e.type} ${e.streamId}`);
  assert.deepEqual(all, [`user ${c.id}`, `start ${c.id}`, `end ${c.id}`], 'each event once, across the reset');
  again.close();
  await withTimeout(reader.sse.done.catch(() => {}), 5_000, 'the first connection died with the runtime');
});
