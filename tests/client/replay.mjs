// Replays a recorded fixture (tests/client/fixtures/*.json, written by record-fixtures.mjs)
// through public/client.js, and checks what the app saw. Used by tests/client/client.test.mjs on
// the committed fixtures and by tests/e2e/client.test.mjs on freshly recorded ones.
//
// FakeEventSource and the fake fetch stand in for the browser's EventSource and fetch (the one
// mock here, and it says so): the test hands the client one recorded frame at a time, so its
// splice, rejoin and ending logic is driven deterministically, with no network and no timing.
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { followStream, frameResumePoint } from '../../public/client.js';

export const tick = () => new Promise((resolve) => setImmediate(resolve));

/** Every fixture in `dir`: { name: parsed JSON }. */
export function loadFixtures(dir) {
  return Object.fromEntries(
    readdirSync(dir).filter((n) => n.endsWith('.json')).map((n) => [n.slice(0, -5), JSON.parse(readFileSync(join(dir, n), 'utf8'))]),
  );
}

export function fakeBrowser(textResponses = []) {
  const sources = [];
  const fetches = [];
  class FakeEventSource {
    static CONNECTING = 0;
    static OPEN = 1;
    static CLOSED = 2;
    constructor(url) {
      this.url = url;
      this.readyState = FakeEventSource.CONNECTING;
      this.listeners = new Map();
      sources.push(this);
    }
    addEventListener(type, fn) {
      this.listeners.set(type, [...(this.listeners.get(type) ?? []), fn]);
    }
    close() {
      this.readyState = FakeEventSource.CLOSED;
    }
    dispatch(type, event) {
      for (const fn of this.listeners.get(type) ?? []) fn(event);
    }
    /** One SSE `message` event carrying one frame, as the server writes it (`data: <json>`). */
    emit(frame) {
      assert.notEqual(this.readyState, FakeEventSource.CLOSED, `frame sent to a closed EventSource: ${JSON.stringify(frame)}`);
      this.readyState = FakeEventSource.OPEN;
      const id = frameResumePoint(frame);
      this.dispatch('message', { data: JSON.stringify(frame), lastEventId: id === undefined ? '' : String(id) });
    }
    /** A network error the browser recovers from by itself (it reconnects with Last-Event-ID). */
    nativeReconnect() {
      this.readyState = FakeEventSource.CONNECTING;
      this.dispatch('error', {});
    }
    /** The browser gave up on this EventSource (e.g. a 5xx answer to its reconnect). */
    giveUp() {
      this.readyState = FakeEventSource.CLOSED;
      this.dispatch('error', {});
    }
  }
  const queue = [...textResponses];
  const fetch = async (url) => {
    fetches.push(url);
    const next = queue.shift() ?? { status: 500, body: { error: 'unexpected', message: 'no recorded /text answer left' } };
    return { ok: next.status < 300, status: next.status, json: async () => structuredClone(next.body) };
  };
  const waitForSource = async (i) => {
    for (let n = 0; sources.length <= i; n++) {
      if (n > 5000) assert.fail(`the client never opened EventSource #${i + 1}`);
      await tick();
    }
    return sources[i];
  };
  return { EventSource: FakeEventSource, fetch, sources, fetches, waitForSource };
}

export const fromOf = (url) => new URL(url, 'http://reader.test').searchParams.get('from');

/** Follow a fixture's stream: feed each recorded connection its frames, and collect what the app saw. */
export async function replay(fx, extra = {}) {
  const browser = fakeBrowser(fx.textResponses);
  const seen = { texts: [], durables: [], ends: [], errors: [] };
  const handle = followStream({
    streamId: fx.streamId,
    token: fx.token,
    ...fx.options,
    retryDelayMs: 0,
    onText: (text, seq) => seen.texts.push({ text, seq }),
    onDurable: (d) => seen.durables.push(d),
    onEnd: (end) => seen.ends.push(end),
    onError: (err) => seen.errors.push(err),
    EventSourceImpl: browser.EventSource,
    fetchImpl: browser.fetch,
    ...extra,
  });
  for (const [i, conn] of fx.connections.entries()) {
    const es = await browser.waitForSource(i);
    assert.equal(fromOf(es.url), String(conn.from), `connection #${i + 1} joins at the right offset`);
    for (const ev of conn.events) {
      if (ev.transport === 'reconnect') es.nativeReconnect();
      else if (ev.transport === 'closed') es.giveUp();
      else es.emit(ev);
    }
  }
  const final = await handle.done;
  return { final, seen, browser, handle };
}

/**
 * What every fixture must satisfy, whatever its path to the end: the reader ends holding exactly
 * the durable text (`expect.text`, taken from D1 by the recorder); while live its text only grows
 * and is always a prefix of the produced text; it may shrink once, at the very end, to the
 * durable text (an ending short of what was shown live).
 */
export function assertFollowed(fx, { final, seen, browser }) {
  const { expect } = fx;
  const produced = expect.produced ?? expect.text;
  assert.equal(final.text, expect.text, 'the reader ends holding exactly the durable text');
  assert.equal(final.seq, expect.text.length, 'seq is where the text stops');
  assert.equal(final.status, expect.status);
  assert.equal(final.durableSeq, expect.durableSeq);
  assert.equal(final.ended, true);
  assert.equal(browser.sources.length, expect.connections, 'EventSources opened');
  assert.equal(browser.fetches.length, expect.textFetches, '/text reads');
  assert.ok(browser.sources.every((es) => es.readyState === 2), 'every EventSource is closed at the end');
  for (const url of browser.sources.map((s) => s.url)) {
    assert.equal(url.replace(/&from=\d+$/, ''), `/streams/${fx.streamId}/events?token=${fx.token}`);
  }
  for (const url of browser.fetches) assert.equal(url, `/streams/${fx.streamId}/text?token=${fx.token}`);
  let prev = fx.options?.initialText ?? '';
  seen.texts.forEach(({ text, seq }, i) => {
    if (text.length < prev.length) {
      assert.equal(i, seen.texts.length - 1, 'the text shrinks only once, at the end');
      assert.equal(text, expect.text, 'and only to the durable text');
    } else {
      assert.ok(text.length > prev.length && text.startsWith(prev), `while live the text only grows: ${JSON.stringify(prev)} → ${JSON.stringify(text)}`);
    }
    assert.ok(produced.startsWith(text), `every text is a prefix of the produced text: ${JSON.stringify(text)}`);
    assert.ok(seq >= text.length);
    prev = text;
  });
  for (let i = 1; i < seen.durables.length; i++) assert.ok(seen.durables[i] > seen.durables[i - 1], 'durableSeq is monotone');
  assert.equal(seen.ends.length, 1, 'onEnd exactly once');
  assert.deepEqual(seen.ends[0], { status: expect.status, seq: expect.durableSeq, error: expect.error ?? undefined, text: expect.text });
  assert.deepEqual(seen.errors, []);
}

/** The fixtures (or end-statuses cases) that follow a stream, as { name, fx }. */
export function streamCases(fixtures) {
  const out = [];
  for (const [name, fx] of Object.entries(fixtures)) {
    if (fx.cases) for (const c of fx.cases) out.push({ name: `${name}: ${c.status}`, fx: { token: fx.token, ...c } });
    else if (fx.connections) out.push({ name, fx });
  }
  return out;
}
