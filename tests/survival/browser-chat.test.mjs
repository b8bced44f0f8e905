// The example chat (examples/chat/) in headless Chromium with `useChat`, surviving a kill of
// rindle's runtime mid-answer (SPEC §10, issue 35 "In the browser"). Here the chat's producer
// Worker and rindle-streams run in two `wrangler dev` processes joined by a dev registry of
// their own (the service binding RINDLE crosses it), one local D1, so rindle's runtime is
// killed with SIGKILL alone while the chat's producer (producer.js's pipe of the AI SDK's
// toUIMessageStream, with no survival code of its own) keeps running, as a deploy of rindle
// leaves the app's Worker running. The model holds each answer before its end (MOCK_HOLD_URL)
// until the test has acted, so "mid-answer" is a state, not a moment on a clock.
//   * kill and restart mid-answer: the rendered message equals the source (no duplicated text,
//     reasoning or tool part), the row is `complete`, the page ends not streaming;
//   * `stop()` after a restart (once the producer logged its resume) cancels: the row
//     ends `cancelled`, the model stops, the page is not streaming.
import test from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { browserSession, CHAT_CONFIG, ROOT, startStack } from '../e2e/harness.mjs';
import { startHold, until, withTimeout } from '../e2e/util.mjs';
import { assertShowsAnswer, renderedMessages, waitAnswered } from '../browser/chat-page.mjs';

const WORDS = 30;

let rindle;
let chat;
let hold;
let session;

test.before(async () => {
  const registry = mkdtempSync(join(os.tmpdir(), 'rindle-registry-'));
  hold = await startHold();
  rindle = await startStack({ name: 'survival-browser-rindle', registry, vars: { SSE_RETRY_MS: '100' } });
  const { buildChatPage } = await import(join(ROOT, 'examples', 'chat', 'build.mjs'));
  await buildChatPage();
  chat = await startStack({
    name: 'survival-browser-chat',
    config: CHAT_CONFIG,
    registry,
    persistDir: rindle.persistDir, // one D1: the app inserts the rows rindle fills
    vars: { MOCK_DELAY_MS: '10', MOCK_WORDS: String(WORDS), MOCK_HOLD_URL: hold.url },
  });
  session = await browserSession({ viewport: { width: 900, height: 1000 } });
});
test.after(async () => {
  await session?.close();
  await hold?.close();
  await chat?.stop();
  await rindle?.stop();
});

const rowOf = (id) => rindle.db.get('SELECT status FROM messages WHERE id = ?', id);
let chats = 0;

/** A page that asked `question`, its answer held by the model before its end. */
async function startAnswer(question) {
  const page = await session.context.newPage();
  // The transport's reconnect budget outlasts a restart of the runtime.
  await page.goto(`${chat.baseUrl}/?chat=survival-${process.pid}-${++chats}&giveUpAfterMs=60000`);
  await page.waitForSelector('#status');
  await page.fill('#prompt', question);
  await page.click('#send');
  const answerId = await (await page.waitForSelector('article[data-role="assistant"]')).getAttribute('data-id');
  await withTimeout(hold.held(answerId), 30_000, `the model of ${answerId} to reach its hold`);
  return { page, answerId };
}

/** Kill rindle's runtime alone, restart it, and wait until the chat's producer resumed the answer. */
async function killRindle(answerId) {
  await until(() => rowOf(answerId)?.status === 'streaming', 'the answer streaming');
  await rindle.kill();
  await rindle.restart();
  await chat.waitForLog(new RegExp(`producer_resumed ${answerId} `), 30_000);
}

test('chat: rindle\'s runtime killed mid-answer while the chat\'s producer runs: the rendered answer equals the source, once, and the page ends not streaming', { timeout: 120_000 }, async () => {
  const question = 'Weather in Tokyo, across a crash? 東京 👍🏽';
  const { page, answerId } = await startAnswer(question);
  await killRindle(answerId);
  hold.release(answerId);
  await waitAnswered(page);
  await until(() => rowOf(answerId)?.status === 'complete', 'the row complete');
  await assertShowsAnswer(page, { question, answerId, words: WORDS }, 'after the kill');
  const kinds = (await renderedMessages(page))[1].parts.map((p) => p.type);
  assert.deepEqual(kinds, ['step-start', 'reasoning', 'tool-weather', 'step-start', 'text'], 'reasoning, one tool call, text: nothing duplicated');
  assert.equal(await page.$('#error'), null, 'no error shown');
  await page.close();
  assert.deepEqual(session.pageErrors, [], 'no uncaught page errors');
});

test('chat: stop() after a restart cancels the resumed answer: the row ends cancelled, the model stops, the page is not streaming', { timeout: 120_000 }, async () => {
  const { page, answerId } = await startAnswer('Weather in Oslo, stopped after a crash?');
  await killRindle(answerId);
  await page.waitForFunction(() => document.getElementById('status').dataset.status === 'streaming', null, { polling: 20 });
  await page.click('#stop');
  await page.waitForFunction(() => document.getElementById('status').dataset.status === 'ready', null, { polling: 20 });
  await chat.waitForLog(new RegExp(`model_stopped ${answerId} (aborted|cancelled)`), 30_000);
  await until(() => rowOf(answerId)?.status === 'cancelled', 'the row cancelled');
  assert.equal(await page.isDisabled('#stop'), true, 'not streaming');
  assert.equal(await page.$('#error'), null, 'a stop is not an error');
  await page.close();
});
