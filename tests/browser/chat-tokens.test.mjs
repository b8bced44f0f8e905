// No connection outlives its token (SPEC §11), in headless Chromium against the real runtime: the
// example chat with read tokens that live 20 s (READ_TOKEN_SECS=20). Page B follows the chat for
// 50 s (two tokens' lives and more; CHAT_TOKENS_FOLLOW_MS=120000 by hand: two minutes, recorded in
// docs/TESTING.md) while page A sends a turn at the start, halfway and at the end: B shows each
// turn, once, in order, with nothing missed; B's feed connections each end at their token's exp
// (the server ends them: every connection B opened, but the last, lasted about a token's life and
// no longer), and every reconnect carried a fresh token and its position.
//
// Then hidden pages: a page hidden while a turn runs attaches nothing (no answer request) and, once
// shown, shows the turn in order; the time from shown to the answer shown is reported.
import test from 'node:test';
import assert from 'node:assert/strict';
import { browserSession, startStack } from '../e2e/harness.mjs';
import { startProxy, withTimeout } from '../e2e/util.mjs';
import { submitQuestion } from './chat-page.mjs';

const TOKEN_SECS = 20;
const FOLLOW_MS = Number(process.env.CHAT_TOKENS_FOLLOW_MS ?? 50_000);

let stack;
let session;
let proxy;
let chatId = `tokens-${process.pid}`;

test.before(async () => {
  stack = await startStack({
    chat: true,
    name: 'browser-chat-tokens',
    vars: { LEASE_MS: '3000', SSE_RETRY_MS: '100' },
    chatVars: { READ_TOKEN_SECS: String(TOKEN_SECS), MOCK_DELAY_MS: '5', MOCK_WORDS: '20' },
  });
  proxy = await startProxy(stack.baseUrl);
  session = await browserSession({ viewport: { width: 900, height: 1000 } });
});
test.after(async () => {
  await session?.close();
  await proxy?.close();
  await stack?.stop();
});

async function open(base) {
  const page = await session.context.newPage();
  await page.goto(`${base}/?chat=${chatId}`);
  await page.waitForFunction(() => window.feedEvents?.some((e) => e.type === 'ready'), null, { polling: 20 });
  return page;
}

/** Sends `question` from `page`; resolves with the answer's id once `page` shows it done. */
async function send(page, question) {
  const id = await submitQuestion(page, question);
  await shows(page, id);
  return id;
}

/** Resolves once `page` shows answer `id` done and is not streaming. */
const shows = (page, id, timeout = 30_000) =>
  page.waitForFunction(
    (id) => document.querySelector(`article[data-id="${id}"] [data-type="text"][data-state="done"]`) && document.getElementById('status').dataset.status === 'ready',
    id,
    { polling: 20, timeout },
  );

const messageIds = (page) => page.$$eval('article.message', (els) => els.map((e) => e.dataset.id));
const feedRequests = () => proxy.requests.filter((r) => r.url.startsWith(`/streams/chats/${chatId}/events`));
const tokenOf = (url) => new URL(url, 'http://x').searchParams.get('token');
const expOf = (token) => JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString()).exp * 1000;

test(`a page with ${TOKEN_SECS} s tokens follows its chat for ${FOLLOW_MS / 1000} s: every turn once, each connection ended at its token's exp`, { timeout: FOLLOW_MS + 90_000 }, async () => {
  const A = await open(stack.baseUrl);
  const B = await open(proxy.url);
  const began = Date.now();
  const ids = [];
  for (const at of [0, FOLLOW_MS / 2, FOLLOW_MS]) {
    const wait = began + at - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait)); // the schedule of the scenario, not a synchronization
    const id = await send(A, `Weather at second ${at / 1000}?`);
    ids.push(id);
    await shows(B, id);
    assert.deepEqual(await messageIds(B), await messageIds(A), `B shows what A shows after the turn at ${at / 1000} s`);
  }
  const shown = await messageIds(B);
  assert.equal(new Set(shown).size, shown.length, 'nothing twice');
  assert.deepEqual(await B.evaluate(() => window.chatErrors), [], 'no error on B');
  await A.close();
  await B.close();
  // B's feed connections: each carried a token; each but the last ended within a few seconds of its
  // token's exp (the server ended it), never seconds before; every reconnect carried a fresh token
  // and its position (`after=`).
  const feed = feedRequests();
  assert.ok(feed.length >= Math.floor(FOLLOW_MS / (TOKEN_SECS * 1000)), `${feed.length} feed connections in ${FOLLOW_MS / 1000} s of ${TOKEN_SECS} s tokens`);
  const tokens = feed.map((r) => tokenOf(r.url));
  assert.equal(new Set(tokens).size, tokens.length, 'a fresh token for every connection');
  for (let i = 1; i < feed.length; i++) {
    const ended = feed[i].at; // the reconnect follows the end within the jitter (500 ms)
    const exp = expOf(tokens[i - 1]);
    assert.ok(ended >= exp - 200 && ended <= exp + 4_000, `connection ${i} ended ${ended - exp} ms after its token's exp`);
    assert.ok(new URL(feed[i].url, 'http://x').searchParams.get('after'), `reconnect ${i} carried its position`);
  }
});

test('a hidden page attaches nothing while hidden, and shows the turn in order once shown', { timeout: 90_000 }, async (t) => {
  chatId = `hidden-${process.pid}`;
  const A = await open(stack.baseUrl);
  const B = await open(proxy.url);
  await B.evaluate(() => {
    Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => 'hidden' });
    document.dispatchEvent(new Event('visibilitychange'));
  });
  const answersBefore = proxy.requests.filter((r) => r.url.includes('/ui?') || r.url.startsWith(`/api/chat/${chatId}/stream`)).length;
  const id = await send(A, 'Weather while B is hidden?');
  await B.waitForFunction((id) => window.feedEvents.some((e) => e.type === 'end' && e.streamId === id), id, { polling: 20 });
  const answersHidden = proxy.requests.filter((r) => r.url.includes('/ui?') || r.url.startsWith(`/api/chat/${chatId}/stream`)).length;
  assert.equal(answersHidden, answersBefore, 'hidden: no answer requested');
  assert.ok(!(await messageIds(B)).includes(id), 'hidden: not applied');
  const shownAt = Date.now();
  await B.evaluate(() => {
    Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => 'visible' });
    document.dispatchEvent(new Event('visibilitychange'));
  });
  await withTimeout(shows(B, id), 30_000, 'B shows the turn once shown');
  const caughtUpMs = Date.now() - shownAt;
  assert.deepEqual(await messageIds(B), await messageIds(A), 'B shows what A shows, in order');
  t.diagnostic(`a hidden page, shown: the turn it missed shown ${caughtUpMs} ms later`);
});
