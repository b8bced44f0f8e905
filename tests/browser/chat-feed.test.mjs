// One conversation, live on every tab and device (SPEC §11), in headless Chromium against the real
// runtime: the example chat (examples/chat/, React 19 in its development build, so StrictMode
// mounts every effect twice; `useChat({ chat })` + public/chat-feed.js's `syncChat`), one
// `wrangler dev` serving the example's producer Worker (AI SDK streamText on the scripted mock
// model) and rindle-streams, one local D1. Each page reaches the app through a proxy of its own,
// so one page's network can be cut without touching the others'.
//
// The model holds every answer before its end (MOCK_HOLD_URL) until the test lets it go, so
// "mid-answer" is a state the test waits for, never a moment on the model's clock.
//
// 1. Three pages of one chat: A sends; B (opened before) and C (opened mid-answer) reach the same
//    rendered UIMessage[] as A (the source's reasoning, tool call and text, nothing doubled),
//    within 500 ms of A; B's answer and feed connections are cut at least 10 times at seeded
//    places (E2E_SEED replays them) and it ends unchanged; each mount makes one feed subscription
//    (StrictMode ran its effect twice) and one resume request per answer it did not start; then a
//    turn sent from another browser context (a second profile) appears in A, B and C without a
//    reload, B's feed cut twice more during it.
// 2. A stream cut without its `finish` (A's answer connection ended short, and refused for 5 s):
//    the page reconnects with bounded backoff, ends with the whole message and is not left
//    streaming; the other pages get the turn through the feed.
// 3. The runtime killed mid-answer (every object reset, the feed's included): every page's feed
//    resumes from its Last-Event-ID, the lost turn ends once in each, and the next turn appears
//    once in every page.
import test from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, browserSession, startStack } from '../e2e/harness.mjs';
import { planCuts, rng, seedFromEnv, startHold, startProxy, until, withTimeout } from '../e2e/util.mjs';
import { projectPart, renderedMessages, sourceMessage, submitQuestion } from './chat-page.mjs';

const SHOTS = join(ROOT, 'test-artifacts');
const LEASE_MS = 3000;
const WORDS = 40;
const SEED = seedFromEnv();
/** The UI chunks of an answer after the model's hold (text-end, finish-step, finish). */
const AFTER_HOLD = 3;

let stack;
let hold;
let session;
let other; // a second browser context: another profile, another device
const proxies = {};
const pages = {};
const chatId = `feed-${process.pid}`;

test.before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  hold = await startHold();
  stack = await startStack({
    chat: true,
    name: 'browser-chat-feed',
    // SSE_RETRY_MS: the first reconnect after a cut, feed and answer alike, within 100 ms.
    // RESUME_WINDOW_MS=0: the kill takes the producer with it; the lease seals the row at once.
    vars: { LEASE_MS: String(LEASE_MS), SSE_RETRY_MS: '100', RESUME_WINDOW_MS: '0' },
    chatVars: { MOCK_DELAY_MS: '10', MOCK_WORDS: String(WORDS), MOCK_HOLD_URL: hold.url },
  });
  for (const name of ['A', 'B', 'C', 'D']) proxies[name] = await startProxy(stack.baseUrl);
  session = await browserSession({ viewport: { width: 900, height: 1000 } });
  other = await session.browser.newContext({ reducedMotion: 'reduce', colorScheme: 'light' });
  other.setDefaultTimeout(20_000);
  other.on('page', (page) => page.on('pageerror', (e) => session.pageErrors.push(`${page.url()}: ${e.message}`)));
});
test.after(async () => {
  await session?.close();
  for (const proxy of Object.values(proxies)) await proxy.close();
  await hold?.close();
  await stack?.stop();
});

// ---------------------------------------------------------------------------------------

/** Opens the chat in a page of `context` through proxy `name`; resolves once its feed is caught up. */
async function open(name, context = session.context) {
  const page = await context.newPage();
  await page.goto(`${proxies[name].url}/?chat=${chatId}&react=development`);
  await page.waitForFunction(() => window.feedEvents?.some((e) => e.type === 'ready'), null, { polling: 20 });
  pages[name] = page;
  return page;
}

/** Sends `question` from `page`; resolves with the answer's id once the model holds its end. */
async function send(page, question) {
  const answerId = await submitQuestion(page, question);
  await withTimeout(hold.held(answerId), 30_000, `the model of ${answerId} to reach its hold`);
  return answerId;
}

/** Resolves with the time `page` shows `ids` (in order), every answer done, and is not streaming. */
const finished = (page, ids) =>
  page
    .waitForFunction(
      (ids) =>
        document.getElementById('status').dataset.status === 'ready' &&
        JSON.stringify([...document.querySelectorAll('article.message')].map((a) => a.dataset.id)) === JSON.stringify(ids) &&
        [...document.querySelectorAll('article[data-role="assistant"]')].every((a) => a.querySelector('[data-type="text"][data-state="done"]')),
      ids,
      { polling: 10, timeout: 30_000 },
    )
    .then(() => Date.now());

/** The answer's rendered parts equal the source's: reasoning, a tool call with its result, text. */
async function assertAnswer(messages, { answerId, question }, label) {
  const source = await sourceMessage(answerId, question, WORDS);
  const answer = messages.find((m) => m.id === answerId);
  assert.deepEqual(answer.parts, source.parts.map(projectPart), `${label}: the parts equal the source's`);
  assert.deepEqual(answer.parts.map((p) => p.type), ['step-start', 'reasoning', 'tool-weather', 'step-start', 'text'], `${label}: one reasoning, one tool call, one text`);
  const asked = messages[messages.indexOf(answer) - 1];
  assert.deepEqual([asked.role, asked.parts[0]?.text], ['user', question], `${label}: its question just before it`);
}

/** A page's requests through its proxy: feed subscriptions (every feed request but the
 * reconnects the proxy's cuts caused: a cut before the feed's first `id:` reconnects without a
 * Last-Event-ID), and resume requests. */
function requests(name) {
  const all = proxies[name].requests;
  const feedRequests = all.filter((r) => r.url.startsWith(`/streams/chats/${chatId}/events`)).length;
  const feedCuts = proxies[name].cutLog.filter((c) => c.url.includes('/events')).length;
  return {
    subscriptions: feedRequests - feedCuts,
    // A reconnect carries its position: syncChat's own reconnects put it in `?after=` (a new
    // EventSource sends no Last-Event-ID), with a token asked again.
    feedReconnects: all.filter((r) => r.url.startsWith(`/streams/chats/${chatId}/events`) && (r.headers['last-event-id'] || new URL(r.url, 'http://x').searchParams.get('after'))).length,
    resumes: all.filter((r) => r.url.startsWith(`/api/chat/${chatId}/stream`)).map((r) => new URL(r.url, 'http://x').searchParams.get('answer')),
  };
}

const allMessages = () => Promise.all(['A', 'B', 'C', 'D'].filter((n) => pages[n]).map(async (n) => [n, await renderedMessages(pages[n])]));

// ---------------------------------------------------------------------------------------

const turns = []; // { answerId, question } in order

test('three pages, StrictMode: A sends; B (opened before, cut 10+ times) and C (opened mid-answer) end equal to A within 500 ms; a turn from another browser appears everywhere', { timeout: 120_000 }, async (t) => {
  t.diagnostic(`seed ${SEED} (E2E_SEED=${SEED} replays where B's connections are cut)`);
  const r = rng(SEED);
  const B = await open('B');
  const A = await open('A');
  // B's answer and feed connections, cut at seeded places while the first answer streams (the
  // model holds its end until all of them were made).
  const question = 'Weather in Tokyo, for everyone? 東京 👍🏽';
  const budget = (await chunkCount(question)) - AFTER_HOLD;
  const cuts = planCuts(r, { cuts: 10 + r.int(0, 4), budget });
  const allCut = proxies.B.plan(cuts, { match: /\/ui\?|\/events\?/ });
  const answerId = await send(A, question);
  turns.push({ answerId, question });
  await withTimeout(allCut, 60_000, () => `B's planned cuts ${JSON.stringify(cuts)} (made ${proxies.B.cuts})`);
  // C, opened mid-answer, attaches the answer in flight.
  const C = await open('C');
  await C.waitForSelector(`article[data-id="${answerId}"] [data-type="reasoning"]`);
  // Every page shows what was produced before the hold (B caught up after its last cut).
  const userId = await A.$eval('article[data-role="user"]', (a) => a.dataset.id);
  const ids = [userId, answerId];
  const held = await renderedMessages(A);
  for (const page of [B, C]) await until(async () => JSON.stringify(await renderedMessages(page)) === JSON.stringify(held), 'caught up with A before the end', 15_000);
  const reconnects = await B.evaluate(() => window.rindleReconnects);
  t.diagnostic(`B's answer reconnects: ${reconnects.map((x) => `${x.attempt}/${Math.round(x.delayMs)}ms`).join(' ')}`);
  hold.release(answerId);
  const [tA, tB, tC] = await Promise.all([finished(A, ids), finished(B, ids), finished(C, ids)]);
  t.diagnostic(`finished after A: B ${tB - tA} ms, C ${tC - tA} ms; B cut ${proxies.B.cuts} times (${proxies.B.cutLog.filter((c) => c.url.includes('/events')).length} on its feed)`);
  assert.ok(Math.abs(tB - tA) <= 500 && Math.abs(tC - tA) <= 500, `within 500 ms of A: B ${tB - tA} ms, C ${tC - tA} ms`);
  const [[, a], [, b], [, c]] = await allMessages();
  assert.deepEqual(b, a, 'B shows what A shows');
  assert.deepEqual(c, a, 'C shows what A shows');
  await assertAnswer(a, turns[0], 'A');
  assert.ok(proxies.B.cuts >= 10, `B cut ${proxies.B.cuts} times`);

  // Each mount: one feed subscription (its effect ran twice: StrictMode), one resume per answer it
  // did not start; the sender none.
  for (const [name, page] of [['A', A], ['B', B], ['C', C]]) {
    assert.equal(await page.evaluate(() => window.syncChatCalls), 2, `${name}: StrictMode ran the effect twice`);
    assert.equal(requests(name).subscriptions, 1, `${name}: one feed subscription`);
  }
  assert.deepEqual(requests('A').resumes, [], 'A sent it: no resume');
  assert.deepEqual(requests('B').resumes, [answerId], 'B: one resume');
  assert.deepEqual(requests('C').resumes, [answerId], 'C: one resume');
  await B.screenshot({ path: join(SHOTS, 'chat-feed-B.png'), fullPage: true });

  // A turn from another browser context: it appears in A, B and C without a reload. B's feed is
  // cut twice more while it comes.
  const D = await open('D', other);
  assert.deepEqual(await renderedMessages(D), a, 'the second profile loads the same chat');
  // B's feed connection is idle between turns: its next event is the new turn's user message. Cut
  // inside the event after it (the start), then right after the reconnect's first event.
  const feed = /\/events\?/;
  const [{ events: carried }] = proxies.B.liveEvents(feed);
  const feedCuts = proxies.B.cuts;
  const moreCut = proxies.B.plan([{ afterEvent: carried + 1, intoNext: r.int(1, 20) }, { afterEvent: 1, intoNext: 0 }], { match: feed });
  const second = 'And in Zürich, from my phone?';
  const secondId = await send(D, second);
  turns.push({ answerId: secondId, question: second });
  await withTimeout(moreCut, 30_000, () => `B's feed cuts (made ${proxies.B.cuts - feedCuts} of 2)`);
  for (const page of [A, B, C]) await page.waitForSelector(`article[data-id="${secondId}"] [data-type="reasoning"]`);
  hold.release(secondId);
  const userId2 = await D.$$eval('article[data-role="user"]', (els) => els.at(-1).dataset.id);
  const all = [userId, answerId, userId2, secondId];
  await Promise.all([A, B, C, D].map((page) => finished(page, all)));
  const final = await allMessages();
  for (const [name, messages] of final) assert.deepEqual(messages, final[0][1], `${name} shows what A shows`);
  await assertAnswer(final[0][1], turns[1], 'the second turn');
  assert.ok(requests('B').feedReconnects >= 2, 'B\'s feed reconnected with its Last-Event-ID');
  assert.deepEqual(requests('A').resumes, [secondId], 'A: one resume for the turn it did not start');
  assert.deepEqual(requests('B').resumes, [answerId, secondId]);
  assert.deepEqual(requests('C').resumes, [answerId, secondId]);
  assert.deepEqual(requests('D').resumes, [], 'D sent it');
  for (const name of ['A', 'B', 'C', 'D']) assert.deepEqual(await pages[name].evaluate(() => window.chatErrors), [], `${name}: no error`);
});

test('a stream cut without its finish, and refused for 5 s: the page reconnects by itself, ends with the whole message, not streaming', { timeout: 60_000 }, async (t) => {
  const { A, B, C, D } = pages;
  const question = 'Weather in Seoul, through a bad network?';
  const before = await A.evaluate(() => window.rindleReconnects.length);
  const answerId = await send(A, question);
  turns.push({ answerId, question });
  await A.waitForSelector(`article[data-id="${answerId}"] [data-type="reasoning"]`);
  // The answer's connection ends short (no finish) and every reconnect is refused for 5 s; the
  // answer finishes meanwhile.
  const outage = proxies.A.outage(new RegExp(`/streams/${answerId}/ui\\?`), 5000);
  const outageStart = Date.now();
  hold.release(answerId);
  await until(() => A.evaluate(() => window.rindleReconnects.length).then((n) => n >= before + 2), 'A reconnecting during the outage');
  assert.equal(await A.getAttribute('#status', 'data-status'), 'streaming', 'still waiting for its answer, not done');
  const refused = await outage;
  const ids = await D.$$eval('article.message', (els) => els.map((e) => e.dataset.id));
  const tDone = await finished(A, [...ids.slice(0, 4), await A.$$eval('article[data-role="user"]', (els) => els.at(-1).dataset.id), answerId]);
  const reconnects = (await A.evaluate(() => window.rindleReconnects)).slice(before);
  t.diagnostic(`refused ${refused} reconnects in 5 s; ${reconnects.length} reconnects, delays ${reconnects.map((r) => Math.round(r.delayMs)).join(', ')} ms; done ${tDone - outageStart} ms after the cut`);
  assert.ok(refused >= 2, `reconnects were tried and refused (${refused})`);
  assert.ok(reconnects.every((r) => r.delayMs <= 4000), 'bounded backoff (at most 4 s between attempts)');
  assert.ok(reconnects.some((r) => r.attempt >= 2), 'the delay grew while refused');
  const messages = await renderedMessages(A);
  await assertAnswer(messages, turns[2], 'after the outage');
  assert.equal(await A.$('#error'), null, 'no error');
  for (const page of [B, C, D]) assert.deepEqual(await finished(page, messages.map((m) => m.id)).then(() => renderedMessages(page)), messages);
});

// Last: it kills the runtime.
test('the runtime killed mid-answer (the feed object reset too): every feed resumes from its Last-Event-ID, no turn missed or doubled', { timeout: 90_000 }, async (t) => {
  const { A, B, C, D } = pages;
  const question = 'Weather in Athens, before the crash?';
  const lostId = await send(B, question);
  for (const page of [A, C, D]) await page.waitForSelector(`article[data-id="${lostId}"] [data-type="reasoning"]`);
  const reconnectsBefore = Object.fromEntries(Object.keys(pages).map((n) => [n, requests(n).feedReconnects]));
  await stack.kill();
  await stack.restart();
  // The lease seals the lost answer; every page's answer ends (saying what was saved) and is not streaming.
  await until(() => stack.db.get('SELECT status FROM messages WHERE id = ?', lostId)?.status === 'interrupted', 'the lost answer sealed', LEASE_MS + 15_000);
  for (const page of [A, B, C, D]) await page.waitForFunction(() => document.getElementById('status').dataset.status !== 'streaming', null, { polling: 50, timeout: 30_000 });
  // The feed goes on: the next turn, from C, appears once everywhere.
  const next = 'Weather in São Paulo, after the crash?';
  const nextId = await send(C, next);
  turns.push({ answerId: nextId, question: next });
  hold.release(nextId);
  const cUser = await C.$$eval('article[data-role="user"]', (els) => els.at(-1).dataset.id);
  const ids = await C.$$eval('article.message', (els) => els.map((e) => e.dataset.id));
  assert.deepEqual(ids.slice(-2), [cUser, nextId]);
  await Promise.all([A, B, C, D].map((page) => page.waitForFunction((id) => document.querySelector(`article[data-id="${id}"] [data-type="text"][data-state="done"]`) && document.getElementById('status').dataset.status !== 'streaming', nextId, { polling: 20, timeout: 30_000 })));
  const final = await allMessages();
  for (const [name, messages] of final) {
    const shown = messages.map((m) => m.id);
    assert.deepEqual(shown, final[0][1].map((m) => m.id), `${name}: the same messages, in the same order`);
    assert.equal(new Set(shown).size, shown.length, `${name}: none twice`);
    assert.deepEqual(messages.at(-1), final[0][1].at(-1), `${name}: the turn after the crash as the others show it`);
    assert.ok(requests(name).feedReconnects > reconnectsBefore[name], `${name}: its feed reconnected with its Last-Event-ID`);
  }
  await assertAnswer(final[0][1], turns.at(-1), 'the turn after the crash');
  t.diagnostic(`messages: ${final[0][1].map((m) => m.role[0]).join('')}`);
  assert.deepEqual(session.pageErrors, [], 'no uncaught page errors');
});

/** How many UI chunks the answer to `question` has. */
async function chunkCount(question) {
  const { streamAnswer, seedOf, uiStreamOptions } = await import('../../examples/chat/answer.js');
  let n = 0;
  for await (const _ of streamAnswer({ seed: seedOf(question), kind: 'full', words: WORDS, prompt: question }).toUIMessageStream(uiStreamOptions('count'))) n += 1;
  return n;
}
