// The demo page (public/) end to end in headless Chromium, against the real local runtime
// (wrangler dev + workerd + local D1, DEV_MODE=1) and the mock model server: start a response,
// drop the page's connection mid-stream, open the reader tab mid-stream, and check every view
// ends with exactly mockText({ seed, tokens }) — the text the page asked the mock for — and that
// the read-back from D1 agrees; then Stop a second response and check it ends `cancelled`.
// "Mid-stream" is a state, not a moment: the mock holds each response before a given token
// (POST /_mock/hold, keyed by the response's seed) until the test releases it, so the drop, the
// reader tab and the Stop happen before the response's end, however slow the machine.
// Screenshots: test-artifacts/demo.png (the finished response), demo-reader.png, demo-cancelled.png.
import test from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import {
  ROOT, browserSession, startMock, startStack,
} from '../e2e/harness.mjs';
import { until } from '../e2e/util.mjs';
import { mockText, mockTokens } from '../../mock/mock-text.mjs';

const SHOTS = join(ROOT, 'test-artifacts');
const TERMINAL = ['complete', 'cancelled', 'error', 'interrupted', 'disconnected'];

let mock;
let stack;
let session;
let context;
let pageErrors = [];

test.before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  mock = await startMock();
  stack = await startStack({ name: 'browser-demo', demo: true, vars: { DEV_MODE: '1', DEV_MOCK_MODEL_URL: mock.url } });
  // reducedMotion (the session's default): the watermark bar has no transition, so a screenshot shows its final width.
  session = await browserSession({ viewport: { width: 1100, height: 900 } });
  ({ context, pageErrors } = session);
});
test.after(async () => {
  await session?.close();
  await stack?.stop();
  await mock?.stop();
});

// ---------------------------------------------------------------------------------------
// Page helpers

const statusOf = (page) => page.getAttribute('#status', 'data-status');
const numberOf = async (page, id) => Number(await page.textContent(`#${id}`));
const liveText = (page) => page.evaluate(() => document.getElementById('live-text').textContent);

/** Wait until the page's status is one of `statuses`. */
function waitStatus(page, statuses, timeout = 30_000) {
  const wait = page.waitForFunction((want) => want.includes(document.getElementById('status').dataset.status), statuses, { timeout, polling: 50 });
  return explainTimeout(page, wait, `status in ${statuses}`);
}

/** Wait until the page shows at least `n` produced UTF-16 units. */
function waitSeq(page, n, timeout = 20_000) {
  const wait = page.waitForFunction((min) => Number(document.getElementById('seq').textContent) >= min, n, { timeout, polling: 50 });
  return explainTimeout(page, wait, `seq >= ${n}`);
}

/**
 * A wait that times out says what the page, the row, the mock and the Worker's log showed,
 * so a failure seen once (in CI) can be explained without rerunning it.
 */
async function explainTimeout(page, wait, what) {
  try {
    return await wait;
  } catch (err) {
    const view = await page.evaluate(() => ({
      status: document.getElementById('status').dataset.status,
      detail: document.getElementById('status-detail').textContent,
      seq: document.getElementById('seq').textContent,
      error: document.getElementById('error').hidden ? null : document.getElementById('error').textContent,
      streamId: document.getElementById('stream-id').textContent,
    })).catch((e) => ({ unavailable: e.message }));
    const id = view.streamId;
    const row = id ? (() => { try { return rowOf(id); } catch (e) { return e.message; } })() : null;
    const upstream = await fetch(`${mock.url}/_mock/requests`).then((r) => r.json()).catch((e) => e.message);
    // The stream's own lines, and every line that reports a failure (a panic's message does not
    // name the stream).
    const failure = /panicked|Critical|Reinitializ|\berror\b|ERROR|Uncaught|exception/i;
    const log = stack.logs().split('\n').filter((line) => (id && line.includes(id)) || failure.test(line)).slice(-80).join('\n');
    err.message += `\nwaiting for ${what}; the page: ${JSON.stringify(view)}`
      + `\nits row: ${JSON.stringify(row && { ...row, body: row.body?.length })}`
      + `\nthe mock's requests: ${JSON.stringify(upstream)}`
      + `\nthe Worker's log (the stream's lines and every failure):\n${log}`;
    throw err;
  }
}

/** Fill the producer form and press Start; returns { streamId, upstream: data-* of #upstream }. */
async function startResponse(page, { format, tokens, rate, seed, fail = '' }) {
  await page.selectOption('#format', format);
  await page.fill('#tokens', String(tokens));
  await page.fill('#rate', String(rate));
  await page.fill('#seed', String(seed));
  await page.selectOption('#fail', fail);
  await page.click('#start');
  await page.waitForFunction((s) => document.getElementById('upstream').dataset.seed === s, String(seed));
  await page.waitForFunction(() => /^demo-/.test(document.getElementById('stream-id').textContent));
  const upstream = await page.evaluate(() => ({ ...document.getElementById('upstream').dataset }));
  // The page asked the mock for exactly what the test chose: that is what makes mockText the oracle.
  assert.deepEqual(upstream, { format, tokens: String(tokens), rate: String(rate), seed: String(seed), ...(fail ? { fail } : {}) });
  return { streamId: await page.textContent('#stream-id'), upstream };
}

/** The read-back card: { match, text, meta } once it is shown. */
async function readBack(page) {
  await page.waitForSelector('#readback:not([hidden])');
  await page.waitForFunction(() => document.getElementById('readback-match').dataset.match !== undefined);
  return page.evaluate(() => ({
    match: document.getElementById('readback-match').dataset.match,
    label: document.getElementById('readback-match').textContent,
    text: document.getElementById('readback-text').textContent,
    meta: document.getElementById('readback-meta').textContent,
  }));
}

/** The mock's record of the request for this seed (each test uses its own seed). */
async function mockRequest(seed) {
  const all = await (await fetch(`${mock.url}/_mock/requests`)).json();
  const mine = all.filter((r) => r.query.seed === String(seed));
  assert.equal(mine.length, 1, `one upstream request with seed ${seed}: ${JSON.stringify(mine)}`);
  return mine[0];
}

const rowOf = (id) => stack.db.get('SELECT status, body, seq, error FROM messages WHERE id = ?', id);

// ---------------------------------------------------------------------------------------

test('demo: a response survives "Drop connection", a reader tab joins mid-stream, both end with exactly the mock text, and the D1 read-back matches', { timeout: 90_000 }, async () => {
  const choice = { format: 'anthropic', tokens: 300, rate: 50, seed: 7 };
  const expected = mockText(choice);
  await mock.hold(choice.seed, 200); // until the drop and the reader tab are done
  const page = await context.newPage();
  await page.goto(`${stack.baseUrl}/`);
  assert.equal(await statusOf(page), 'idle');
  // Every /events request of this page, recorded from the start (the id is not known yet).
  const eventUrls = [];
  page.on('request', (req) => req.url().includes('/events?') && eventUrls.push(new URL(req.url())));

  const { streamId } = await startResponse(page, choice);
  await waitStatus(page, ['streaming']);
  const subscriptions = () => eventUrls.filter((u) => u.pathname === `/streams/${streamId}/events`).map((u) => Number(u.searchParams.get('from')));

  // Force a disconnect a quarter of the way in: the page rejoins at ?from=<what it holds>.
  await waitSeq(page, Math.floor(expected.length / 4));
  const heldAtDrop = (await liveText(page)).length;
  assert.equal(await statusOf(page), 'streaming');
  // The drop's rejoin is the next /events request of this stream.
  await Promise.all([page.waitForRequest((req) => new URL(req.url()).pathname === `/streams/${streamId}/events`), page.click('#drop')]);

  // The reader tab, opened from the page's own button while the response is still streaming.
  const [reader] = await Promise.all([context.waitForEvent('page'), page.click('#open-tab')]);
  await reader.waitForLoadState('domcontentloaded');
  const joinUrl = new URL(reader.url());
  assert.equal(joinUrl.searchParams.get('join'), streamId, 'the tab joins this stream');
  await waitStatus(reader, ['streaming']);
  await waitSeq(reader, 1);
  assert.equal(await statusOf(page), 'streaming', 'the producer page is still streaming when the reader has joined');
  const readerSeqAtJoin = await numberOf(reader, 'seq');
  assert.ok(readerSeqAtJoin < expected.length, `the reader joined mid-stream (at ${readerSeqAtJoin} of ${expected.length} units)`);
  assert.equal(await reader.isHidden('#producer'), true, 'a reader tab has no producer controls');
  assert.equal(await reader.isVisible('#role'), true, 'a reader tab says it is a reader');
  assert.equal(await reader.isHidden('#stop'), true, 'a reader cannot stop the response');

  await mock.release(choice.seed);
  await waitStatus(page, TERMINAL);
  await waitStatus(reader, TERMINAL);

  const froms = subscriptions();
  assert.equal(froms[0], 0, `the first subscription starts at 0 (${froms})`);
  const rejoins = froms.slice(1).filter((f) => f > 0 && f < expected.length);
  assert.ok(rejoins.length >= 1, `the drop made the page rejoin mid-stream with from > 0 (requests: ${froms}; held ${heldAtDrop})`);
  assert.ok(rejoins[0] >= heldAtDrop, `the rejoin resumed at ${rejoins[0]}, at or after what the page held at the drop (${heldAtDrop})`);

  // The producer page: exactly the mock text, fully durable, and the read-back agrees.
  assert.equal(await statusOf(page), 'complete', await page.textContent('#status-detail'));
  assert.equal(await liveText(page), expected, 'the page shows exactly the mock text');
  assert.equal(await numberOf(page, 'seq'), expected.length);
  assert.equal(await numberOf(page, 'durable-seq'), expected.length);
  const back = await readBack(page);
  assert.equal(back.match, 'true', `read-back: ${back.label}`);
  assert.equal(back.text, expected, 'the read-back from D1 is exactly the mock text');
  assert.match(back.meta, new RegExp(`^status complete, seq ${expected.length}\\b`));
  assert.equal(await page.isVisible('#error'), false, `no error shown: ${await page.textContent('#error')}`);
  assert.equal(await page.isEnabled('#start'), true, 'Start is enabled again');
  assert.equal(await page.isDisabled('#drop'), true);
  assert.equal(await page.isDisabled('#stop'), true);

  // The reader tab ends with the same text.
  assert.equal(await statusOf(reader), 'complete');
  assert.equal(await liveText(reader), expected, 'the reader tab shows exactly the mock text');
  assert.equal((await readBack(reader)).match, 'true');

  // D1 and the upstream.
  const row = rowOf(streamId);
  assert.equal(row.status, 'complete');
  assert.equal(row.body, expected, 'the D1 body is exactly the mock text');
  assert.equal(row.seq, expected.length);
  const up = await mockRequest(choice.seed);
  assert.deepEqual(up.query, { tokens: '300', rate: '50', seed: '7' });
  assert.equal(up.path, '/v1/messages');
  assert.equal(up.completed, true);
  assert.equal(up.aborted, false, 'dropping a reader never touches the upstream');
  assert.equal(up.authorization, true);

  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: join(SHOTS, 'demo.png'), fullPage: true });
  await reader.screenshot({ path: join(SHOTS, 'demo-reader.png'), fullPage: true });
  await reader.close();
  await page.close();
  assert.deepEqual(pageErrors, [], 'no uncaught page errors');
});

test('demo: Stop cancels a response mid-stream: it ends cancelled, the upstream is aborted, the D1 read-back matches the text shown', { timeout: 60_000 }, async () => {
  const choice = { format: 'openai-chat', tokens: 400, rate: 60, seed: 8 };
  const HELD_AT = 40;
  // The mock holds the response before token 40 (and never lets it go): the Stop comes mid-stream.
  const beforeHold = mockTokens(choice).slice(0, HELD_AT).join('');
  await mock.hold(choice.seed, HELD_AT);
  const page = await context.newPage();
  await page.goto(`${stack.baseUrl}/`);
  const { streamId } = await startResponse(page, choice);
  await waitStatus(page, ['streaming']);
  await waitSeq(page, beforeHold.length);
  assert.equal(await page.isEnabled('#stop'), true, 'Stop is enabled while streaming');
  await page.click('#stop');
  await waitStatus(page, TERMINAL);

  assert.equal(await statusOf(page), 'cancelled', await page.textContent('#status-detail'));
  const shown = await liveText(page);
  assert.equal(shown, beforeHold, 'the page shows exactly the text sent before the stop');
  const back = await readBack(page);
  assert.equal(back.match, 'true', `read-back: ${back.label}`);
  assert.equal(back.text, shown);
  assert.match(back.meta, /^status cancelled, /);
  assert.equal(await page.isEnabled('#start'), true);
  assert.equal(await page.isDisabled('#stop'), true);

  const row = rowOf(streamId);
  assert.equal(row.status, 'cancelled');
  assert.equal(row.body, shown, 'D1 holds exactly the text the page shows');
  const up = await until(async () => {
    const r = await mockRequest(choice.seed);
    return r.aborted && r;
  }, 'the mock to see Stop abort its request');
  assert.equal(up.completed, false);
  assert.equal(up.tokensSent, HELD_AT, 'the upstream sent nothing after the hold');
  await mock.release(choice.seed);

  await page.screenshot({ path: join(SHOTS, 'demo-cancelled.png'), fullPage: true });
  await page.close();
  assert.deepEqual(pageErrors, []);
});

test('demo: an upstream failure ends the response as error and shows the Worker\'s message', { timeout: 60_000 }, async () => {
  const choice = { format: 'openai-responses', tokens: 40, rate: 0, seed: 9, fail: 'error' };
  const beforeFailure = mockTokens(choice).slice(0, 20).join(''); // the mock fails at tokens / 2
  const page = await context.newPage();
  await page.goto(`${stack.baseUrl}/`);
  const { streamId } = await startResponse(page, choice);
  await waitStatus(page, TERMINAL);
  assert.equal(await statusOf(page), 'error');
  assert.match(await page.textContent('#status-detail'), /the upstream reported an error: The server had an error/);
  assert.equal(await liveText(page), beforeFailure, 'the text up to the failure, exactly');
  const back = await readBack(page);
  assert.equal(back.match, 'true');
  assert.match(back.meta, /^status error, /);
  assert.equal(rowOf(streamId).status, 'error');
  await page.close();
  assert.deepEqual(pageErrors, []);
});
