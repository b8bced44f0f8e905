// The example chat in headless Chromium with the AI SDK's own DefaultChatTransport (issue 38):
// React 19 + `useChat` from @ai-sdk/react, no rindle code in the page's transport. The example's
// route handler answers the POST with toUIMessageStreamResponse and writes a copy of its SSE
// through rindle (consumeSseStream); `resume: true` resumes from rindle (the answer the history
// left out, by name, or the chat's resume GET, 204 when none).
//
// The model holds every answer before its end (MOCK_HOLD_URL, util.mjs's startHold, the same hold
// as chat.test.mjs) until the test releases it, and the test waits until the model is there, so a
// reload or a second tab surely comes mid-answer; no step waits on the clock. Cases: send; a
// reload mid-answer; a second tab; a reconnect after the answer finished (the history has it,
// the resume GET answers 204). In each the rendered message equals the source, no part twice,
// and the page ends not streaming. Then, with both transports, the history and the resume
// cannot miss an answer: one that ends between the history read and the reconnect, one still
// `pending` (inserted, not yet opened) when the page loads. And one answer at a time per chat is
// the database's decision, and the example never drops a message its client did not show
// (../e2e/chat-store-rules.mjs). Seeded questions (E2E_SEED replays).
import test from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, browserSession, startStack } from '../e2e/harness.mjs';
import { seedFromEnv, startHold, uiChunksOf, until, withTimeout } from '../e2e/util.mjs';
import { openStream, signStreamToken } from '../../public/producer.js';
import { seedOf, streamAnswer, uiStreamOptions } from '../../examples/chat/answer.js';
import { assertShowsAnswer, waitAnswered, waitSomeText } from './chat-page.mjs';
import { checkStoreRules } from '../e2e/chat-store-rules.mjs';

const SEED = seedFromEnv();
const WORDS = 40;
const SHOTS = join(ROOT, 'test-artifacts');
let stack;
let session;
let hold;

test.before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  hold = await startHold();
  stack = await startStack({ chat: true, name: 'browser-stock-chat', chatVars: { MOCK_DELAY_MS: '5', MOCK_WORDS: String(WORDS), MOCK_HOLD_URL: hold.url } });
  session = await browserSession({ viewport: { width: 900, height: 1000 } });
});
test.after(async () => {
  await session?.close();
  await hold?.close();
  await stack?.stop();
});

let n = 0;
const question = (what) => `${what} #${SEED}-${++n}: weather? 東京 👍🏽`;
const newChat = () => `chat-${process.pid}-${SEED % 100000}-${++n}`;
const rowOf = (id) => stack.db.get('SELECT status FROM messages WHERE id = ?', id);
const waitRow = (id, status) => until(() => rowOf(id)?.status === status, `row ${id} to be ${status}`, 20_000);
const release = (id) => hold.release(id);

async function openChat(chatId, transport, page) {
  page ??= await session.context.newPage();
  await page.goto(`${stack.baseUrl}/?chat=${chatId}${transport === 'stock' ? '&transport=stock' : ''}`);
  await page.waitForSelector('#status');
  return page;
}

/** Ask on `page`; resolves with the answer's id once the model holds it before its end and the page shows its text. */
async function ask(page, q) {
  await page.fill('#prompt', q);
  await page.click('#send');
  const article = await page.waitForSelector('article[data-role="assistant"][data-id^="a-"]');
  const answerId = await article.getAttribute('data-id');
  await withTimeout(hold.held(answerId), 30_000, `the model of ${answerId} to reach its hold`);
  await waitSomeText(page);
  return answerId;
}

test('stock: send: the answer streams back on the POST and rindle holds the same chunks; equal to the source', async () => {
  const q = question('send');
  const page = await openChat(newChat(), 'stock');
  const answerId = await ask(page, q);
  assert.equal(rowOf(answerId).status, 'streaming', 'held mid-way');
  await release(answerId);
  await waitAnswered(page);
  await waitRow(answerId, 'complete');
  await assertShowsAnswer(page, { question: q, answerId, words: WORDS }, 'send');
  const source = streamAnswer({ seed: seedOf(q), kind: 'full', words: WORDS, prompt: q }).toUIMessageStream(uiStreamOptions(answerId));
  const produced = [];
  for await (const chunk of source) produced.push(chunk);
  assert.deepEqual(uiChunksOf(stack.db.get('SELECT body FROM messages WHERE id = ?', answerId).body), produced, 'rindle holds the SSE copy');
  await page.screenshot({ path: join(SHOTS, 'chat-stock.png'), fullPage: true });
  await page.close();
});

test('stock: a reload mid-answer resumes it from rindle: shown once, equal to the source', async () => {
  const q = question('reload');
  const page = await openChat(newChat(), 'stock');
  const answerId = await ask(page, q);
  await page.reload();
  await page.waitForSelector(`article[data-id="${answerId}"]`);
  await waitSomeText(page);
  assert.equal(rowOf(answerId).status, 'streaming', 'the reloaded page resumed it mid-answer');
  await release(answerId);
  await waitAnswered(page);
  await assertShowsAnswer(page, { question: q, answerId, words: WORDS }, 'reload');
  await page.close();
});

test('stock: a second tab opened mid-answer shows the same answer; both end equal to the source', async () => {
  const q = question('tabs');
  const chatId = newChat();
  const first = await openChat(chatId, 'stock');
  const answerId = await ask(first, q);
  const second = await openChat(chatId, 'stock');
  await second.waitForSelector(`article[data-id="${answerId}"]`);
  await waitSomeText(second);
  assert.equal(rowOf(answerId).status, 'streaming', 'the second tab joined mid-answer');
  await release(answerId);
  await Promise.all([waitAnswered(first), waitAnswered(second)]);
  await assertShowsAnswer(first, { question: q, answerId, words: WORDS }, 'first tab');
  await assertShowsAnswer(second, { question: q, answerId, words: WORDS }, 'second tab');
  await first.close();
  await second.close();
});

test('stock: a reconnect after the answer finished: the history shows it, the resume GET answers 204, shown once', async () => {
  const q = question('finished');
  const chatId = newChat();
  const page = await openChat(chatId, 'stock');
  const answerId = await ask(page, q);
  await release(answerId);
  await waitAnswered(page);
  await waitRow(answerId, 'complete');
  const resumes = [];
  page.on('response', (res) => res.url().includes('/streams/') && resumes.push({ url: res.url().replace(/token=[^&]+/, 'token=…'), status: res.status() }));
  await page.reload();
  await page.waitForSelector(`article[data-id="${answerId}"] [data-type="text"][data-state="done"]`);
  await until(() => resumes.length > 0, 'the resume GET');
  assert.deepEqual(resumes.map((r) => r.status), [204], JSON.stringify(resumes));
  assert.match(resumes[0].url, new RegExp(`/streams/chats/${chatId}/stream\\?token=`));
  await assertShowsAnswer(page, { question: q, answerId, words: WORDS }, 'after it finished');
  await page.close();
});

for (const transport of ['stock', 'rindle']) {
  test(`${transport}: an answer that ends between the history read and the reconnect is resumed, not missed`, async () => {
    const q = question(`ends-between-${transport}`);
    const chatId = newChat();
    const first = await openChat(chatId, transport);
    const answerId = await ask(first, q);
    // The second page reads the history (the answer in flight, left out), and its reconnect is
    // held until the answer has finished and its row is sealed.
    const second = await session.context.newPage();
    const resumeUrl = transport === 'stock' ? `**/streams/${answerId}/ui?**` : `**/api/chat/${chatId}/stream?answer=${answerId}`;
    let held;
    const reached = new Promise((resolve) => second.route(resumeUrl, (route) => { held = route; resolve(); }));
    await openChat(chatId, transport, second);
    await reached;
    await release(answerId);
    await waitRow(answerId, 'complete');
    await held.continue();
    await waitAnswered(second);
    await assertShowsAnswer(second, { question: q, answerId, words: WORDS }, `${transport}: finished before the reconnect`);
    await waitAnswered(first);
    await first.close();
    await second.close();
  });

  test(`${transport}: an answer still pending (inserted, not yet opened) when the page loads is resumed once it opens`, async () => {
    const q = question(`pending-${transport}`);
    const chatId = newChat();
    const answerId = `a-pending-${SEED}-${++n}`;
    // What the app's POST writes before it opens the stream (examples/chat/worker.js).
    stack.db.run(`INSERT INTO messages (id, chat_id, role, body, status) VALUES (?, ?, 'user', ?, 'complete')`, `q-${answerId}`, chatId,
      JSON.stringify({ id: `q-${answerId}`, role: 'user', parts: [{ type: 'text', text: q }] }));
    stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES (?, ?, 'assistant')`, answerId, chatId);
    const waiting = stack.waitForLog(new RegExp(`reader_awaits_open.*${answerId}|${answerId}.*reader_awaits_open`), 20_000);
    const page = await openChat(chatId, transport);
    await waiting; // the page's resume reached the stream's object before the open
    const stream = await openStream({
      baseUrl: stack.baseUrl,
      streamId: answerId,
      token: await signStreamToken({ secret: stack.secret, stream: answerId, scope: 'write' }),
      format: 'ui',
    });
    await stream.pipe(streamAnswer({ seed: seedOf(q), kind: 'full', words: WORDS, prompt: q }).toUIMessageStream(uiStreamOptions(answerId)));
    await waitAnswered(page);
    await assertShowsAnswer(page, { question: q, answerId, words: WORDS }, `${transport}: pending at load`);
    await page.close();
  });
}

test('the history assembles a finished answer from its body and overlapping chunk rows (offset-aware, as /text): shown once, equal to the source', async () => {
  const q = question('history');
  const chatId = newChat();
  const answerId = `a-history-${SEED}-${++n}`;
  const source = streamAnswer({ seed: seedOf(q), kind: 'full', words: WORDS, prompt: q }).toUIMessageStream(uiStreamOptions(answerId));
  let text = '';
  for await (const chunk of source) text += `${JSON.stringify(chunk)}\n`;
  // Cut points off a surrogate pair's second half, so each piece is valid UTF-16 for D1.
  const at = (f) => {
    let i = Math.floor(text.length * f);
    while (/[\uDC00-\uDFFF]/.test(text[i])) i += 1;
    return i;
  };
  // The body holds [0, 40%); chunk rows (seq = the offset at their end) hold [30%, 70%) and
  // [60%, 100%): each overlaps what comes before it, as a checkpoint retried after a lost reply does.
  const [a, b, c, d] = [at(0.3), at(0.4), at(0.6), at(0.7)];
  stack.db.run(`INSERT INTO messages (id, chat_id, role, body, status) VALUES (?, ?, 'user', ?, 'complete')`, `q-${answerId}`, chatId,
    JSON.stringify({ id: `q-${answerId}`, role: 'user', parts: [{ type: 'text', text: q }] }));
  stack.db.run(`INSERT INTO messages (id, chat_id, role, body, status) VALUES (?, ?, 'assistant', ?, 'complete')`, answerId, chatId, text.slice(0, b));
  stack.db.run(`INSERT INTO message_chunks (id, streamId, seq, text) VALUES (?, ?, ?, ?)`, `${answerId}-1`, answerId, d, text.slice(a, d));
  stack.db.run(`INSERT INTO message_chunks (id, streamId, seq, text) VALUES (?, ?, ?, ?)`, `${answerId}-2`, answerId, text.length, text.slice(c));
  const page = await openChat(chatId, 'rindle');
  await waitAnswered(page);
  await assertShowsAnswer(page, { question: q, answerId, words: WORDS }, 'history from body + chunk rows');
  await page.close();
});

test('one answer at a time per chat is the database\'s decision: six sends held just before their writes, released together: one starts an answer, five get 409', { timeout: 120_000 }, async (t) => {
  // A stack of its own whose sends wait before their writes (MOCK_HOLD_START), so all six have
  // passed any check a read before the insert could make: only the writes' own condition decides.
  const raceHold = await startHold();
  const race = await startStack({ chat: true, name: 'browser-stock-chat-race', chatVars: { MOCK_DELAY_MS: '5', MOCK_WORDS: String(WORDS), MOCK_HOLD_URL: raceHold.url, MOCK_HOLD_START: '1' } });
  t.after(async () => {
    await race.stop();
    await raceHold.close();
  });
  const chatId = newChat();
  const sends = [0, 1, 2, 3, 4, 5].map((i) =>
    fetch(`${race.baseUrl}/api/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ id: chatId, trigger: 'submit-message', messages: [{ id: `u-${i}`, role: 'user', parts: [{ type: 'text', text: question(`race-${i}`) }] }] }),
    }).then(async (res) => ({ status: res.status, body: await res.json() })));
  await withTimeout(Promise.all([0, 1, 2, 3, 4, 5].map((i) => raceHold.held(`start-u-${i}`))), 30_000, 'the six sends to reach their writes');
  for (let i = 0; i < 6; i++) raceHold.release(`start-u-${i}`);
  const answers = await Promise.all(sends);
  const started = answers.filter((a) => a.status === 200);
  assert.equal(started.length, 1, JSON.stringify(answers.map((a) => a.status)));
  assert.deepEqual(answers.filter((a) => a.status !== 200).map((a) => [a.status, a.body.error]), Array(5).fill([409, 'answer_in_progress']));
  const assistants = race.db.all(`SELECT id FROM messages WHERE chat_id = ? AND role = 'assistant'`, chatId);
  assert.deepEqual(assistants.map((r) => r.id), [started[0].body.streamId], 'one answer row');
  raceHold.release(started[0].body.streamId);
  await until(() => race.db.get('SELECT status FROM messages WHERE id = ?', started[0].body.streamId)?.status === 'complete', 'the answer to complete', 20_000);
});

test('the example never drops a message its client did not show: a stale send keeps the turn it missed; regenerations and edits replace only what was shown (D1)', async () => {
  await checkStoreRules({ stack, hold, chatId: `rules-${process.pid}-${SEED % 100000}` });
});

test('no uncaught page errors', () => {
  assert.deepEqual(session.pageErrors, []);
});
