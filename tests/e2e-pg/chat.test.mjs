// The example chat (examples/chat/) on Postgres: its producer Worker keeps its messages in the
// stack's database through its own Hyperdrive binding (store.js, node-postgres), as rindle-streams
// does through its own (DURABLE_BACKEND = "postgres"). No browser: the page's requests, by fetch.
//
// The model is the example's scripted mock (examples/chat/answer.js, the upstream model is the
// one thing mocked); it holds each answer before its end (MOCK_HOLD_URL), and a send that inserted
// its answer's row waits before its commit (MOCK_HOLD_COMMIT), until the test releases it: so
// "mid-answer" and "inside concurrent transactions" are states the test waits for, never a clock.
// Cases: a send whose rows end complete in Postgres, with the history and the resume read back
// from there before and after its end, and a second send mid-answer refused; six concurrent sends:
// the database starts exactly one answer; the store's rules (../e2e/chat-store-rules.mjs).
import test from 'node:test';
import assert from 'node:assert/strict';
import { startStack } from '../e2e/harness.mjs';
import { seedFromEnv, startHold, until, withTimeout } from '../e2e/util.mjs';
import { sourceMessage } from '../browser/chat-page.mjs';
import { checkStoreRules } from '../e2e/chat-store-rules.mjs';

const SEED = seedFromEnv();
const WORDS = 12;
let stack;
let hold;

test.before(async () => {
  hold = await startHold();
  stack = await startStack({
    chat: true,
    backend: 'postgres',
    name: 'e2e-pg-chat',
    chatVars: { MOCK_DELAY_MS: '2', MOCK_WORDS: String(WORDS), MOCK_HOLD_URL: hold.url, MOCK_HOLD_COMMIT: '1' },
  });
});
test.after(async () => {
  await hold?.close();
  await stack?.stop();
});

let n = 0;
const newChat = () => `pg-chat-${process.pid}-${SEED % 100000}-${++n}`;
const question = (what) => `${what} #${SEED}-${++n}: weather? 東京 👍🏽`;
const userMessage = (id, text) => ({ id, role: 'user', parts: [{ type: 'text', text }] });

/** The page's POST /api/chat with `messages`; resolves once the example answered (after the test releases its hold). */
function send(chatId, messages) {
  return fetch(`${stack.baseUrl}/api/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ id: chatId, trigger: 'submit-message', messages }),
  }).then(async (res) => ({ status: res.status, body: await res.json() }));
}

/** A send of the last message, never held before its commit. */
function sendNow(chatId, messages) {
  hold.release(`commit-${messages.at(-1).id}`);
  return send(chatId, messages);
}

const getJson = async (path) => {
  const res = await fetch(`${stack.baseUrl}${path}`);
  return { status: res.status, body: res.status === 204 ? null : await res.json() };
};

/** The chat's rows, read from Postgres (stack.db is the stack's database). */
const chatRows = (chatId) => stack.db.all(`SELECT id, role, status FROM messages WHERE chat_id = ? ORDER BY created_at, role = 'assistant'`, chatId);

test('a send on Postgres: the example writes its rows there, the history and the resume read them back, a second send mid-answer is refused', async () => {
  const chatId = newChat();
  const q = question('send');
  const first = await sendNow(chatId, [userMessage('u-1', q)]);
  assert.equal(first.status, 200, JSON.stringify(first.body));
  const answerId = first.body.streamId;
  await withTimeout(hold.held(answerId), 30_000, 'the model to hold the answer before its end');

  // Mid-answer: the rows are in Postgres, the history leaves the answer out and names it active.
  assert.deepEqual(chatRows(chatId), [
    { id: 'u-1', role: 'user', status: 'complete' },
    { id: answerId, role: 'assistant', status: 'streaming' },
  ]);
  const during = await getJson(`/api/chat/${chatId}/messages`);
  assert.equal(during.status, 200);
  assert.deepEqual(during.body.messages, [userMessage('u-1', q)]);
  assert.equal(during.body.active?.streamId, answerId);
  const resume = await getJson(`/api/chat/${chatId}/stream`);
  assert.equal(resume.status, 200);
  assert.equal(resume.body.streamId, answerId);

  // A second send while the answer is in flight: refused, nothing written.
  const second = await sendNow(chatId, [userMessage('u-1', q), userMessage('u-2', question('second'))]);
  assert.deepEqual([second.status, second.body.error], [409, 'answer_in_progress']);
  assert.deepEqual(chatRows(chatId).map((r) => r.id), ['u-1', answerId]);

  hold.release(answerId);
  await until(() => chatRows(chatId)[1]?.status === 'complete', `answer ${answerId} to be complete in Postgres`, 20_000);
  const row = stack.db.get(`SELECT body, seq FROM messages WHERE id = ?`, answerId);
  const lines = row.body.split('\n').filter(Boolean);
  assert.ok(lines.length > WORDS, `the body is the ui stream's NDJSON (${lines.length} lines)`);
  assert.equal(JSON.parse(lines[0]).type, 'start');
  assert.equal(Number(row.seq), row.body.length);
  assert.deepEqual(stack.db.all(`SELECT id FROM message_chunks WHERE streamId = ?`, answerId), [], 'compacted at the seal');

  // After the end: the history has the whole answer, equal to the source; nothing to resume.
  const after = await getJson(`/api/chat/${chatId}/messages`);
  assert.equal(after.body.active, null);
  const source = JSON.parse(JSON.stringify(await sourceMessage(answerId, q, WORDS))); // as JSON carries it (no `undefined` fields)
  assert.deepEqual(after.body.messages, [userMessage('u-1', q), source]);
  assert.equal((await getJson(`/api/chat/${chatId}/stream`)).status, 204);
});

/** The Worker's connections to the stack's database waiting on an advisory lock (the chat's). */
const waitingOnTheChatLock = () =>
  Number(stack.db.get(`SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'`).n);

test('one answer at a time per chat is the database\'s decision on Postgres: six concurrent sends, one starts an answer, five get 409', async () => {
  // Each send that inserts its answer's row waits before its commit. The test lets them go only
  // when all six are inside the database: holding an uncommitted answer row, or waiting for the
  // chat's lock. Without the lock all six insert (none sees the others' uncommitted rows) and all
  // six start an answer.
  const chatId = newChat();
  const ids = [0, 1, 2, 3, 4, 5].map((i) => `race-${i}`);
  const sends = ids.map((id) => send(chatId, [userMessage(id, question(id))]));
  const inserted = new Set();
  for (const id of ids) hold.held(`commit-${id}`).then(() => inserted.add(id));
  await until(() => inserted.size >= 1 && inserted.size + waitingOnTheChatLock() === ids.length, 'all six sends inside their transactions', 30_000);
  for (const id of ids) hold.release(`commit-${id}`);
  const answers = await Promise.all(sends);
  const started = answers.filter((a) => a.status === 200);
  assert.equal(started.length, 1, JSON.stringify(answers.map((a) => a.status)));
  assert.deepEqual(answers.filter((a) => a.status !== 200).map((a) => [a.status, a.body.error]), Array(5).fill([409, 'answer_in_progress']));
  const answerId = started[0].body.streamId;
  assert.deepEqual(chatRows(chatId).filter((r) => r.role === 'assistant').map((r) => r.id), [answerId], 'one answer row');
  hold.release(answerId);
  await until(() => stack.db.get('SELECT status FROM messages WHERE id = ?', answerId)?.status === 'complete', 'the answer to complete', 20_000);
});

test('the example never drops a message its client did not show, on Postgres: a stale send keeps the turn it missed; regenerations and edits replace only what was shown', async () => {
  await checkStoreRules({ stack, hold, chatId: newChat() });
});
