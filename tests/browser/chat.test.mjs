// The example chat (examples/chat/) in headless Chromium: React 19 + `useChat` from
// @ai-sdk/react + public/chat-transport.js, against the real local runtime (one wrangler dev
// running the example's producer Worker — AI SDK streamText on the scripted mock model, the
// producer helpers — and rindle-streams, one local D1). The pages load through a proxy the test
// can cut. The source of truth is the scripted answer itself: the test runs the same
// streamText + toUIMessageStream in Node and builds the message with readUIMessageStream.
//
// In every case the rendered message's parts equal the source's (no duplicated text or
// reasoning, no lost tool call): a plain send; the SSE connection cut twice mid-answer; a reload
// mid-answer; a second tab opened mid-answer. Then `stop()` mid-answer ends with the row
// `cancelled` (the model stops) and the page not streaming, also on an answer resumed after a
// reload; and killing the runtime mid-answer
// leaves the page not streaming, with an error, within the lease (and the row `interrupted`
// once the runtime is back; a reload then shows exactly the saved answer, the message of the
// row's durable lines). Screenshots: test-artifacts/chat*.png.
import test from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { readUIMessageStream } from 'ai';
import { ROOT, browserSession, startStack } from '../e2e/harness.mjs';
import { durableFromDb, startProxy, uiChunksOf, uiMessageOf, until } from '../e2e/util.mjs';
import { seedOf, streamAnswer, uiStreamOptions } from '../../examples/chat/answer.js';

const SHOTS = join(ROOT, 'test-artifacts');
const LEASE_MS = 3000;
const WORDS = 40;

let stack;
let proxy;
let session;
let context;
let pageErrors = [];

test.before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  stack = await startStack({
    chat: true,
    name: 'browser-chat',
    // SSE_RETRY_MS: the transport's first reconnect after a cut waits at most this long.
    vars: { LEASE_MS: String(LEASE_MS), SSE_RETRY_MS: '100' },
    // ~130 model parts at 30 ms: an answer streams for about 4 s.
    chatVars: { MOCK_DELAY_MS: '30', MOCK_WORDS: String(WORDS) },
  });
  proxy = await startProxy(stack.baseUrl);
  session = await browserSession({ viewport: { width: 900, height: 1000 } });
  ({ context, pageErrors } = session);
});
test.after(async () => {
  await session?.close();
  await proxy?.close();
  await stack?.stop();
});

// ---------------------------------------------------------------------------------------
// The source: the scripted answer to `question`, as the producer sends it.

async function sourceMessage(answerId, question) {
  const result = streamAnswer({ seed: seedOf(question), kind: 'full', words: WORDS, prompt: question });
  let message;
  for await (const snapshot of readUIMessageStream({ stream: result.toUIMessageStream(uiStreamOptions(answerId)) })) message = snapshot;
  return message;
}

/** What the page renders of a part (see Part in examples/chat/page/main.jsx). */
function projectPart(part) {
  if (part.type === 'text' || part.type === 'reasoning') return { type: part.type, state: part.state, text: part.text };
  if (part.type === 'step-start') return { type: part.type };
  if (part.type.startsWith('tool-')) return { type: part.type, state: part.state, toolCallId: part.toolCallId, input: part.input, output: part.output };
  return { type: part.type, json: part };
}

// ---------------------------------------------------------------------------------------
// Page helpers

let chatCounter = 0;
const newChatId = () => `chat-${process.pid}-${++chatCounter}`;
const statusOf = (page) => page.getAttribute('#status', 'data-status');

async function openChat(page, chatId, query = '') {
  await page.goto(`${proxy.url}/?chat=${chatId}${query}`);
  await page.waitForSelector('#status');
}

/** Ask `question`; resolves with the answer's id (= its stream and D1 row id) once it renders. */
async function ask(page, question) {
  await page.fill('#prompt', question);
  await page.click('#send');
  const article = await page.waitForSelector('article[data-role="assistant"]');
  return article.getAttribute('data-id');
}

/** A new page on a chat (a fresh one by default) that asks `question` and waits until mid-answer. */
async function startAnswer(question, { chatId = newChatId(), query = '' } = {}) {
  const page = await context.newPage();
  await openChat(page, chatId, query);
  const answerId = await ask(page, question);
  await waitMidAnswer(page);
  return { page, chatId, answerId };
}

/** How much of the answer the page shows (reasoning and text, UTF-16 units); runs in the page. */
function shownLength() {
  const shown = document.querySelectorAll('article[data-role="assistant"] [data-type="reasoning"] .text, article[data-role="assistant"] [data-type="text"]');
  return [...shown].reduce((n, el) => n + el.textContent.length, 0);
}

/** Wait until the answer is visibly mid-way: its reasoning has started rendering. */
const waitMidAnswer = (page) =>
  page.waitForFunction(() => (document.querySelector('article[data-role="assistant"] [data-type="reasoning"] .text')?.textContent.length ?? 0) >= 10, null, { polling: 20 });

/** Wait until the page is no longer streaming and shows the finished text part. */
const waitAnswered = (page) =>
  page.waitForFunction(
    () => document.getElementById('status').dataset.status === 'ready'
      && document.querySelector('article[data-role="assistant"] [data-type="text"][data-state="done"]') !== null,
    null,
    { polling: 50 },
  );

/** The page's messages as rendered: [{ id, role, parts: [projected part] }]. */
const renderedMessages = (page) =>
  page.evaluate(() =>
    [...document.querySelectorAll('article.message')].map((article) => ({
      id: article.dataset.id,
      role: article.dataset.role,
      parts: [...article.querySelectorAll('.part')].map((el) => {
        const type = el.dataset.type;
        const state = el.dataset.state;
        if (type === 'text') return { type, state, text: el.textContent };
        if (type === 'reasoning') return { type, state, text: el.querySelector('.text').textContent };
        if (type === 'step-start') return { type };
        if (type.startsWith('tool-')) {
          const json = (sel) => (el.querySelector(sel) ? JSON.parse(el.querySelector(sel).textContent) : undefined);
          return { type, state, toolCallId: el.dataset.toolCallId, input: json('pre.input'), output: json('pre.output') };
        }
        return { type, json: JSON.parse(el.textContent) };
      }),
    })),
  );

/** The page shows the question once and the answer once, with exactly the source's parts. */
async function assertShowsAnswer(page, { question, answerId }, label) {
  const source = await sourceMessage(answerId, question);
  const messages = await renderedMessages(page);
  assert.deepEqual(
    messages.map((m) => m.role),
    ['user', 'assistant'],
    `${label}: one question and one answer, no duplicate (${JSON.stringify(messages.map((m) => [m.role, m.id]))})`,
  );
  assert.equal(messages[0].parts[0]?.text, question, `${label}: the question`);
  assert.equal(messages[1].id, answerId, `${label}: the answer's id is its stream id`);
  assert.deepEqual(messages[1].parts, source.parts.map(projectPart), `${label}: the rendered parts equal the source's`);
  const kinds = messages[1].parts.map((p) => p.type);
  assert.deepEqual(kinds, ['step-start', 'reasoning', 'tool-weather', 'step-start', 'text'], `${label}: reasoning, a tool call, text`);
  assert.equal(messages[1].parts[2].state, 'output-available', `${label}: the tool call has its result`);
}

const rowOf = (id) => stack.db.get('SELECT status, error FROM messages WHERE id = ?', id);

/** Wait (polling D1) until the row's status is `status`. */
const waitRow = (id, status, ms = 15_000) => until(() => rowOf(id)?.status === status, `row ${id} to be ${status}`, ms);

// ---------------------------------------------------------------------------------------

test('chat: send a message: the answer renders reasoning, a tool call with its result, and text, equal to the source', { timeout: 60_000 }, async () => {
  const page = await context.newPage();
  const origins = new Set();
  page.on('request', (req) => origins.add(new URL(req.url()).origin));
  await openChat(page, newChatId());
  const question = 'Weather in Tokyo? 東京の天気 👍🏽';
  const answerId = await ask(page, question);
  assert.match(await statusOf(page), /submitted|streaming/);
  await waitAnswered(page);
  await waitRow(answerId, 'complete');
  await assertShowsAnswer(page, { question, answerId }, 'send');
  assert.equal(await page.isDisabled('#stop'), true, 'not streaming any more');
  assert.deepEqual([...origins], [proxy.url], 'the page, its bundle and every request come from the app itself: no CDN');
  await page.screenshot({ path: join(SHOTS, 'chat.png'), fullPage: true });

  // A fresh page of the same chat shows the finished answer from D1, the same parts.
  const again = await context.newPage();
  await openChat(again, new URL(page.url()).searchParams.get('chat'));
  await again.waitForSelector('article[data-role="assistant"] [data-type="text"][data-state="done"]');
  await assertShowsAnswer(again, { question, answerId }, 'reopened');
  await again.close();
  await page.close();
});

test('chat: the SSE connection cut twice mid-answer: the transport resumes it, the parts equal the source', { timeout: 60_000 }, async () => {
  const question = 'Weather in Zürich, with a cut connection?';
  const { page, answerId } = await startAnswer(question);
  for (const nth of ['first', 'second']) {
    // Cut while the answer streams over the current connection, then wait for the transport's
    // reconnect (?from= the last id it delivered), for its response to start and for the answer
    // to move on. The response must have started before the next cut: Chromium silently re-sends
    // a request whose reused connection closes before any answer byte (no new request event, so
    // the test would wait for a reconnect the page never needed). The page may still be rendering
    // chunks of the cut connection, so the new one may not have delivered yet; its reconnect then
    // resumes from the same id.
    const reconnected = page.waitForRequest((req) => /\/ui\?from=[1-9]/.test(req.url()));
    const before = await page.evaluate(shownLength);
    assert.ok(proxy.cut() > 0, `the ${nth} cut dropped a live connection`);
    const response = await (await reconnected).response();
    assert.equal(response?.status(), 200, `the ${nth} reconnect was answered`);
    await page.waitForFunction(`(${shownLength})() > ${before}`, null, { polling: 20 });
  }
  await waitAnswered(page);
  const reconnects = await page.evaluate(() => window.rindleReconnects);
  assert.ok(reconnects.length >= 2, `the transport reconnected after each cut: ${JSON.stringify(reconnects)}`);
  assert.ok(reconnects.every((r) => r.streamId === answerId && r.from > 0), `resumed mid-stream: ${JSON.stringify(reconnects)}`);
  assert.equal(await page.$('#error'), null, 'no error shown');
  await assertShowsAnswer(page, { question, answerId }, 'cut');
  await page.close();
});
test('chat: a reload mid-answer replays the answer whole, once, into the fresh page', { timeout: 60_000 }, async () => {
  const question = 'Weather in Seoul, after a reload?';
  const { page, answerId } = await startAnswer(question);
  await page.reload();
  await page.waitForSelector(`article[data-id="${answerId}"]`);
  assert.ok(['submitted', 'streaming'].includes(await statusOf(page)) || rowOf(answerId).status === 'streaming', 'resumed while the answer was still streaming');
  await waitAnswered(page);
  await waitRow(answerId, 'complete');
  await assertShowsAnswer(page, { question, answerId }, 'reload');
  await page.close();
});

test('chat: a second tab opened mid-answer shows the same answer; both end equal to the source', { timeout: 60_000 }, async () => {
  const question = 'Weather in Athens, in two tabs?';
  const { page, chatId, answerId } = await startAnswer(question);
  const second = await context.newPage();
  await openChat(second, chatId);
  await second.waitForSelector(`article[data-id="${answerId}"] [data-type="reasoning"]`);
  assert.equal(rowOf(answerId).status, 'streaming', 'the second tab joined while the answer was streaming');
  await Promise.all([waitAnswered(page), waitAnswered(second)]);
  await assertShowsAnswer(page, { question, answerId }, 'first tab');
  await assertShowsAnswer(second, { question, answerId }, 'second tab');
  await second.screenshot({ path: join(SHOTS, 'chat-second-tab.png'), fullPage: true });
  await second.close();
  await page.close();
});

for (const resumed of [false, true]) {
  const what = resumed ? 'stop() on an answer resumed after a reload' : 'stop() mid-answer';
  test(`chat: ${what} cancels it: the model stops, the row ends \`cancelled\`, the page is not streaming`, { timeout: 60_000 }, async () => {
    const { page, answerId } = await startAnswer(resumed ? 'Weather in Zürich, stopped after a reload?' : 'Weather in São Paulo, then stop?');
    if (resumed) {
      await page.reload();
      // The resumed replay streams into the fresh page (StrictMode's double mount cancelled nothing).
      await page.waitForSelector(`article[data-id="${answerId}"] [data-type="reasoning"]`);
      await page.waitForFunction(() => document.getElementById('status').dataset.status === 'streaming', null, { polling: 20 });
      assert.equal(rowOf(answerId).status, 'streaming', 'still answering when the resumed page stops it');
    }
    assert.equal(await page.isEnabled('#stop'), true, 'Stop is enabled while streaming');
    await page.click('#stop');
    await page.waitForFunction(() => document.getElementById('status').dataset.status === 'ready', null, { polling: 20 });
    await stack.waitForLog(new RegExp(`model_stopped ${answerId} (aborted|cancelled)`));
    await stack.waitForLog(new RegExp(`answer_end ${answerId} cancelled`));
    assert.equal(rowOf(answerId).status, 'cancelled');
    assert.equal(await page.isDisabled('#stop'), true, 'not streaming');
    assert.equal(await page.$('#error'), null, 'a stop is not an error');
    const [, answer] = await renderedMessages(page);
    assert.equal(answer.id, answerId);
    if (!resumed) {
      assert.equal(answer.parts.some((p) => p.type === 'text' && p.state === 'done'), false, 'the answer stopped before its text was done');
      await page.screenshot({ path: join(SHOTS, 'chat-stopped.png'), fullPage: true });
    }
    await page.close();
  });
}

// Last: it kills the runtime.
test('chat: killing the runtime mid-answer leaves the page not streaming, with an error, within the lease; back up, a reload shows exactly the saved answer', { timeout: 90_000 }, async () => {
  // The transport gives up after LEASE_MS without getting anything through.
  const { page, answerId } = await startAnswer('Weather in Tokyo, before the crash?', { query: `&giveUpAfterMs=${LEASE_MS}` });
  // Kill once a checkpoint holds part of the answer, so the reload below has something to show.
  await until(() => durableFromDb(stack.db, answerId).text.includes('\n'), 'a checkpoint of the answer');
  await stack.kill();
  await page.waitForFunction(() => document.getElementById('status').dataset.status === 'error', null, { polling: 50, timeout: LEASE_MS + 5000 });
  assert.match(await page.textContent('#error'), /gave up reconnecting/);
  assert.equal(await page.isDisabled('#stop'), true, 'not streaming');
  await page.screenshot({ path: join(SHOTS, 'chat-killed.png'), fullPage: true });
  assert.equal(rowOf(answerId).status, 'streaming', 'nobody sealed it yet: the runtime is down');

  // Back up: the lease seals the lost answer `interrupted`; no row stays `streaming`.
  await stack.restart();
  await waitRow(answerId, 'interrupted', LEASE_MS + 10_000);

  // A reload shows exactly what was saved: the message of the row's durable lines, nothing more.
  const { message: saved } = await uiMessageOf(uiChunksOf(durableFromDb(stack.db, answerId).text));
  await page.reload();
  await page.waitForSelector(`article[data-id="${answerId}"]`);
  await page.waitForFunction(() => document.getElementById('status').dataset.status === 'ready', null, { polling: 50 });
  const [, answer] = await renderedMessages(page);
  assert.deepEqual(answer.parts, saved.parts.map(projectPart), 'the reloaded answer is the durable one');
  await page.close();
  assert.deepEqual(pageErrors, [], 'no uncaught page errors');
});
