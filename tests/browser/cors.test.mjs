// Cross-origin in headless Chromium (issue 38): a page on one local port, the rindle-streams
// Worker on another, ALLOWED_ORIGINS naming the first page's origin only. A second page, on a
// third port, is a disallowed origin. In the browser itself:
//   * from the allowed page: a native EventSource (default mode and withCredentials) reads /ui to
//     its ending, and, not closed at [DONE], stops at the server's 204 instead of reconnecting for
//     the ending again; fetch reads /text and /ui (with an Authorization header: preflighted),
//     writes an append and a cancel (preflighted), and the shipped transport's readUIStream reads
//     the whole answer;
//   * from the disallowed page: the same EventSource gets nothing and fails, every fetch is
//     refused by the browser, and nothing it tried to write reached the stream or D1.
import test from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, browserSession, startStack } from '../e2e/harness.mjs';
import { api, d1Snapshot, newStream, ok } from '../e2e/util.mjs';

/** A page server on its own port (its own origin): the page, and public/ as /public/. */
async function pageServer() {
  const server = http.createServer((req, res) => {
    if (req.url === '/') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      return res.end(`<!doctype html><meta charset="utf-8"><title>page</title><script type="module">
        import * as transport from '/public/chat-transport.js';
        window.rindle = transport;
        window.ready = true;
      </script>`);
    }
    const file = /^\/public\/([a-z-]+\.js)$/.exec(req.url)?.[1];
    if (!file) {
      res.writeHead(404);
      return res.end();
    }
    res.writeHead(200, { 'content-type': 'text/javascript; charset=utf-8' });
    return res.end(readFileSync(join(ROOT, 'public', file)));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((resolve) => server.close(resolve)) };
}

let stack;
let allowedPage;
let otherPage;
let session;

test.before(async () => {
  allowedPage = await pageServer();
  otherPage = await pageServer();
  stack = await startStack({ name: 'browser-cors', vars: { ALLOWED_ORIGINS: allowedPage.url } });
  session = await browserSession();
});
test.after(async () => {
  await session?.close();
  await stack?.stop();
  await allowedPage?.close();
  await otherPage?.close();
});

async function open(pageServerOf) {
  const page = await session.context.newPage();
  await page.goto(pageServerOf.url);
  await page.waitForFunction(() => window.ready === true);
  return page;
}

const LINES = [{ type: 'start' }, { type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: 'cross-origin 👋🏽 東京' }, { type: 'text-end', id: 't' }];

/** A finished `ui` stream (lingering), with LINES; returns its id and a read token. */
async function finishedStream() {
  const id = newStream(stack, 'cors-b');
  const c = api(stack, id);
  ok(await c.open(undefined, 'ui'), 'open');
  ok(await c.append(LINES.map((l) => `${JSON.stringify(l)}\n`).join('')), 'append');
  ok(await c.close(), 'close');
  return { id, token: stack.token(id, 'read') };
}

/** In the page: an EventSource on `url`, never closed by the page; its messages until the browser gives up. */
function eventSourceInPage({ url, withCredentials }) {
  return new Promise((resolve) => {
    const es = new EventSource(url, { withCredentials });
    const messages = [];
    es.onmessage = (e) => messages.push({ id: e.lastEventId, data: e.data });
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED) resolve({ messages, closed: true });
      // CONNECTING: a reconnect; a second [DONE] means the ending came again.
      else if (messages.filter((m) => m.data === '[DONE]').length > 1) resolve({ messages, closed: false });
    };
  });
}

test('EventSource from the allowed origin reads /ui to its ending, then stops at the 204; from another origin it gets nothing', async () => {
  const { id, token } = await finishedStream();
  const url = `${stack.baseUrl}/streams/${id}/ui?token=${token}`;
  const page = await open(allowedPage);
  for (const withCredentials of [false, true]) {
    const { messages, closed } = await page.evaluate(eventSourceInPage, { url, withCredentials });
    assert.equal(closed, true, `withCredentials ${withCredentials}: the EventSource stopped`);
    assert.deepEqual(messages.slice(0, LINES.length).map((m) => JSON.parse(m.data)), LINES, `withCredentials ${withCredentials}: every line`);
    assert.deepEqual(messages.slice(LINES.length).map((m) => m.data), ['{"type":"finish"}', '[DONE]'], 'the ending once, then [DONE] once');
    assert.equal(messages[LINES.length].id, 'done');
  }
  const other = await open(otherPage);
  const refused = await other.evaluate(eventSourceInPage, { url, withCredentials: false });
  assert.deepEqual(refused, { messages: [], closed: true }, 'a disallowed origin reads nothing');
  await page.close();
  await other.close();
});

test('fetch from the allowed origin reads and writes (preflighted with an Authorization header); from another origin every call is refused and nothing is written', async () => {
  const id = newStream(stack, 'cors-f');
  const c = api(stack, id);
  ok(await c.open(undefined, 'ui'), 'open');
  ok(await c.append(`${JSON.stringify(LINES[0])}\n`), 'append');
  const calls = ({ base, id, write, read }) => {
    // The status once the headers are readable (a refused call never gets there), then the body
    // unless `live` (a live /ui never ends: the page only checks it was let through).
    const attempt = async (what, url, init, live = false) => {
      let res;
      try {
        res = await fetch(url, init);
      } catch (e) {
        return { what, refused: e.name };
      }
      if (live) {
        await res.body.cancel();
        return { what, status: res.status, type: res.headers.get('content-type') };
      }
      return { what, status: res.status, body: await res.text() };
    };
    return Promise.all([
      attempt('text', `${base}/streams/${id}/text?token=${read}`),
      attempt('ui with a header', `${base}/streams/${id}/ui?from=0`, { headers: { authorization: `Bearer ${read}`, 'last-event-id': '0' } }, true),
      attempt('append', `${base}/streams/${id}/append`, { method: 'POST', headers: { authorization: `Bearer ${write}`, 'content-type': 'text/plain' }, body: '{"type":"text-start","id":"t"}\n' }),
    ]);
  };
  const args = { base: stack.baseUrl, id, write: stack.token(id, 'write'), read: stack.token(id, 'read') };

  const other = await open(otherPage);
  ok(await c.flush(), 'flush'); // D1 holds everything so far: what changes next was written by the calls
  const before = d1Snapshot(stack.db);
  const seqBefore = ok(await c.stats(), 'stats').seq;
  const refused = await other.evaluate(calls, args);
  assert.deepEqual(refused.map((r) => r.refused), ['TypeError', 'TypeError', 'TypeError'], JSON.stringify(refused));
  ok(await c.flush(), 'flush');
  assert.equal(ok(await c.stats(), 'stats').seq, seqBefore, 'the refused append never reached the stream');
  assert.deepEqual(d1Snapshot(stack.db), before, 'nor D1');

  const page = await open(allowedPage);
  const [text, ui, append] = await page.evaluate(calls, args);
  assert.equal(text.status, 200, JSON.stringify(text));
  assert.equal(JSON.parse(text.body).format, 'ui');
  // The live /ui read, preflighted for its Authorization header, let through: its SSE answer is readable.
  assert.equal(ui.status, 200, JSON.stringify(ui));
  assert.match(ui.type, /^text\/event-stream/, JSON.stringify(ui));
  assert.equal(append.status, 200, JSON.stringify(append));
  assert.equal(JSON.parse(append.body).seq, seqBefore + '{"type":"text-start","id":"t"}\n'.length);
  await page.close();
  await other.close();
});

test('the shipped transport reads a whole answer across origins (readUIStream) and cancels it (a preflighted POST)', async () => {
  const id = newStream(stack, 'cors-t');
  const c = api(stack, id);
  ok(await c.open(undefined, 'ui'), 'open');
  ok(await c.append(LINES.map((l) => `${JSON.stringify(l)}\n`).join('')), 'append');
  const page = await open(allowedPage);
  const readToken = stack.token(id, 'read cancel');
  const chunks = page.evaluate(async ({ base, id, token }) => {
    const out = [];
    for await (const chunk of window.rindle.readUIStream({ streamId: id, token, streamsUrl: base })) out.push(chunk);
    return out;
  }, { base: stack.baseUrl, id, token: readToken });
  const cancelled = await page.evaluate(async ({ base, id, token }) => {
    const res = await fetch(`${base}/streams/${id}/cancel`, { method: 'POST', headers: { authorization: `Bearer ${token}` } });
    return { status: res.status, body: await res.json() };
  }, { base: stack.baseUrl, id, token: readToken });
  assert.deepEqual(cancelled, { status: 200, body: { cancelled: true, live: true } });
  ok(await c.close(), 'close (cancelled)');
  assert.deepEqual(await chunks, [...LINES, { type: 'abort' }]);
  await page.close();
});
