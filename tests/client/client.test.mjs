// Unit tests of public/client.js against frames, /text answers and D1 rows recorded from the real
// Worker (fixtures/*.json, written by record-fixtures.mjs), and of the mock model server (mock/).
// Run: node --test tests/client/client.test.mjs
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import {
  applyFrame, assembleDurableText, backoffDelay, followStream, frameResumePoint, initialState, spliceStreamText,
  StreamGapError, TERMINAL_STATUSES,
} from '../../public/client.js';
import { mockAnswer, mockText, mockTokens } from '../../mock/mock-text.mjs';
import { startMockServer } from '../../mock/model-server.mjs';
import { sseParser } from '../e2e/harness.mjs';
import { rng, until } from '../e2e/util.mjs';
import { assertFollowed, fakeBrowser, fromOf, loadFixtures, replay, streamCases, tick } from './replay.mjs';

const FIXTURES = loadFixtures(fileURLToPath(new URL('./fixtures/', import.meta.url)));

// ------------------------------------------------------------------ the recorded fixtures

describe('recorded fixtures', () => {
  const cases = streamCases(FIXTURES);

  test('every fixture was recorded, and every recorded frame obeys SPEC §3', () => {
    for (const [name, fx] of Object.entries(FIXTURES)) assert.equal(fx.recorded?.by, 'tests/client/record-fixtures.mjs', `${name} is recorded`);
    assert.ok(cases.length >= 12, `${cases.length} recorded streams`);
    for (const { name, fx } of cases) {
      for (const conn of fx.connections) {
        for (const f of conn.events.filter((e) => e.type === 'chunk')) {
          assert.equal(f.text.length, f.seq - f.from, `${name}: ${JSON.stringify(f)}`);
          assert.ok(f.text.isWellFormed(), `${name}: no lone surrogate`);
        }
        for (const f of conn.events.filter((e) => e.type === 'end')) assert.ok(TERMINAL_STATUSES.includes(f.status));
      }
    }
  });

  for (const { name, fx } of cases) {
    test(name, async () => {
      const run = await replay(fx);
      assertFollowed(fx, run);
    });
  }

  test('a live end short of what was shown: the reader ends with the durable text (end.seq)', async () => {
    const fx = streamCases(FIXTURES).find((c) => c.name === 'end-statuses: seal-short').fx;
    const end = fx.connections[0].events.at(-1);
    const shown = fx.connections[0].events.filter((e) => e.type === 'chunk').at(-1).seq;
    assert.ok(end.seq < shown, `the recording ends short (end.seq ${end.seq} < ${shown} shown)`);
    const { final, seen } = await replay(fx);
    assert.equal(final.text.length, end.seq);
    assert.equal(seen.texts.at(-2).text.length, shown, 'the longer text was shown while live');
  });

  test('an evicted stream rebuilt and sealed: the reader ends with the durable text, not the longer live text', async () => {
    const fx = FIXTURES['evicted-streaming'];
    const { final, seen } = await replay(fx);
    const held = Math.max(...seen.texts.map((t) => t.text.length));
    assert.ok(held > fx.expect.text.length, `the reader held ${held} units live, more than the ${fx.expect.text.length} durable`);
    assert.equal(final.text, fx.expect.text);
  });

  test('a /text recovery from a terminal row: after `absent` the reader ends with the row, not its longer live text', async () => {
    // The recorded eviction's live frames, then `absent` (a reader whose object holds nothing,
    // e.g. an older server without a revival) and the terminal row /text answered for it.
    const fx = structuredClone(FIXTURES['evicted-streaming']);
    const live = fx.connections[0].events.slice(0, fx.connections[0].events.findIndex((e) => e.transport === 'reconnect'));
    fx.connections = [{ from: 0, events: [...live, { type: 'absent' }] }];
    fx.textResponses = [{ status: 200, body: { text: fx.expect.text, seq: fx.expect.text.length, status: 'interrupted', format: 'text' } }];
    const { final, seen, browser } = await replay(fx);
    const held = Math.max(...seen.texts.map((t) => t.text.length));
    assert.ok(held > fx.expect.text.length, `the reader held ${held} units live, more than the ${fx.expect.text.length} durable`);
    assert.equal(browser.fetches.length, 1, 'one /text read');
    assert.equal(final.text, fx.expect.text, 'the terminal row, not spliced with the longer live text');
    assert.equal(final.status, 'interrupted');
  });

  test('surrogate pairs: seq counts UTF-16 code units', async () => {
    const { final } = await replay(FIXTURES['splice-emoji']);
    assert.equal(final.text.length, 45);
    assert.equal(Array.from(final.text).length, 38, 'seven astral characters, two units each');
    assert.ok(final.text.includes('👩\u200d💻') && final.text.includes('🇯🇵') && final.text.includes('e\u0301'));
  });

  test('assembleDurableText gives the Worker\'s /text for every recorded set of D1 rows', () => {
    const { rows } = FIXTURES['durable-rows'];
    assert.ok(rows.length >= 3);
    for (const r of rows) assert.equal(assembleDurableText(r.body, r.chunks), r.text, r.what);
  });
});

// ------------------------------------------------------------------ pure helpers

describe('pure helpers', () => {
  test('spliceStreamText takes the longer of two prefixes', () => {
    assert.equal(spliceStreamText('ab', 'abc👍'), 'abc👍');
    assert.equal(spliceStreamText('abc👍', 'ab'), 'abc👍');
    assert.equal(spliceStreamText('', ''), '');
  });

  test('frameResumePoint: open → from, chunk → seq, others → undefined', () => {
    assert.equal(frameResumePoint({ type: 'open', from: 3, seq: 9 }), 3);
    assert.equal(frameResumePoint({ type: 'chunk', from: 3, seq: 9, text: 'abcdef' }), 9);
    for (const type of ['durable', 'end', 'stale', 'absent']) assert.equal(frameResumePoint({ type, seq: 9 }), undefined);
  });

  test('assembleDurableText: body, then chunk rows in seq order (seq is where a row ends)', () => {
    assert.equal(assembleDurableText('Hi ', [{ seq: 9, text: '💻!' }, { seq: 6, text: '👩\u200d' }]), 'Hi 👩\u200d💻!');
    assert.equal(assembleDurableText('x', [{ seq: 7, text: '😀b' }, { seq: 4, text: 'a😀' }]), 'xa😀😀b');
    assert.equal(assembleDurableText(null, []), '');
    assert.equal(assembleDurableText('sealed'), 'sealed');
  });

  test('assembleDurableText keeps only the contiguous prefix: a gap stops it, an overlap adds its tail', () => {
    // The same cases as src/engine/text/reading.rs's tests of assemble_durable_text.
    assert.equal(assembleDurableText('ab', [{ seq: 5, text: 'z' }, { seq: 3, text: 'c' }]), 'abc');
    assert.equal(assembleDurableText('abc', [{ seq: 4, text: 'cd' }]), 'abcd');
  });

  test('applyFrame splices, never shrinks, never mutates its input', () => {
    const s0 = initialState();
    const s1 = applyFrame(s0, { type: 'chunk', from: 0, seq: 4, text: 'ab👍' });
    assert.deepEqual(s0, initialState(), 'input untouched');
    assert.equal(s1.text, 'ab👍');
    assert.equal(s1.seq, 4);
    const replayed = applyFrame(s1, { type: 'chunk', from: 0, seq: 2, text: 'ab' });
    assert.equal(replayed.text, 'ab👍', 'a shorter replay does not shrink the text');
    const extended = applyFrame(s1, { type: 'chunk', from: 2, seq: 6, text: '👍cd' });
    assert.equal(extended.text, 'ab👍cd', 'an overlapping replay extends it');
  });

  test('applyFrame reports a gap with a typed error', () => {
    const fx = FIXTURES.gap;
    let state = initialState();
    const [open, first, afterGap] = fx.connections[0].events;
    state = applyFrame(applyFrame(state, open), first);
    assert.throws(() => applyFrame(state, afterGap), (err) => {
      assert.ok(err instanceof StreamGapError);
      assert.deepEqual({ have: err.have, from: err.from }, fx.expect.gapAt);
      return true;
    });
  });

  test('applyFrame: durable is monotone, end seals, open records the watermarks', () => {
    let s = applyFrame(initialState(), { type: 'open', streamId: 'x', from: 0, seq: 0, durableSeq: 0, ended: false });
    assert.deepEqual([s.seq, s.durableSeq, s.status], [0, 0, 'streaming']);
    s = applyFrame(s, { type: 'chunk', from: 0, seq: 10, text: 'hello 👋 w' });
    s = applyFrame(s, { type: 'durable', seq: 8 });
    s = applyFrame(s, { type: 'durable', seq: 6 });
    assert.equal(s.durableSeq, 8);
    s = applyFrame(s, { type: 'end', seq: 10, status: 'error', error: 'boom' });
    assert.deepEqual([s.ended, s.status, s.error, s.durableSeq, s.text], [true, 'error', 'boom', 10, 'hello 👋 w']);
  });

  test('applyFrame: end cuts the text to end.seq, the durable length', () => {
    const live = applyFrame(initialState(), { type: 'chunk', from: 0, seq: 10, text: 'hello 👋 w' });
    const ended = applyFrame(live, { type: 'end', seq: 8, status: 'interrupted' });
    assert.deepEqual([ended.text, ended.seq, ended.durableSeq, ended.status], ['hello 👋', 8, 8, 'interrupted']);
    assert.equal(live.text, 'hello 👋 w', 'input untouched');
  });

  test('applyFrame: an end beyond the text held is a gap (the reader reads /text)', () => {
    const live = applyFrame(initialState(), { type: 'chunk', from: 0, seq: 5, text: 'hello' });
    assert.throws(() => applyFrame(live, { type: 'end', seq: 8, status: 'complete' }), StreamGapError);
  });

  test('backoffDelay: exponential, jittered over the upper half of each step', () => {
    assert.equal(backoffDelay(0, 250, () => 0), 125);
    assert.equal(backoffDelay(0, 250, () => 1), 250);
    assert.equal(backoffDelay(3, 250, () => 0.5), 1500);
    const r = rng(7);
    const delays = Array.from({ length: 100 }, () => backoffDelay(2, 250, r));
    assert.ok(delays.every((d) => d >= 500 && d <= 1000), 'within [ceiling/2, ceiling]');
    assert.ok(new Set(delays).size === 100, '100 readers, 100 different delays');
    assert.ok(Math.max(...delays) - Math.min(...delays) > 400, 'spread over the range, not clustered');
  });
});

// ------------------------------------------------------------------ handle behaviour

describe('followStream handle', () => {
  const fx = FIXTURES['splice-emoji'];
  const events = fx.connections[0].events;

  test('drop() closes the EventSource and rejoins at ?from=<text length>', async () => {
    const browser = fakeBrowser();
    const handle = followStream({ streamId: 'msg_01', token: 'read-token', EventSourceImpl: browser.EventSource, fetchImpl: browser.fetch });
    const first = await browser.waitForSource(0);
    assert.equal(fromOf(first.url), '0');
    for (const f of events.slice(0, 4)) first.emit(f); // open, two chunks, durable: text ends mid-flag
    assert.equal(handle.text.length, 17);
    handle.drop();
    assert.equal(first.readyState, 2, 'the dropped EventSource is closed');
    const second = await browser.waitForSource(1);
    assert.equal(fromOf(second.url), '17', 'a new EventSource carries no Last-Event-ID, so ?from= says where');
    second.emit({ type: 'open', streamId: 'msg_01', from: 17, seq: 45, durableSeq: 5, ended: false });
    second.emit({ type: 'chunk', from: 17, seq: 45, text: fx.expect.text.slice(17) });
    second.emit({ type: 'end', seq: 45, status: 'complete' });
    const final = await handle.done;
    assert.equal(final.text, fx.expect.text);
    assert.equal(second.readyState, 2);
    assert.equal(browser.sources.length, 2);
  });

  test('a token function is asked again before every connection: a connection that ended (its token\'s exp) rejoins from the text held, with a fresh token', async () => {
    const browser = fakeBrowser();
    let minted = 0;
    const handle = followStream({ streamId: 'msg_01', token: async () => `t${++minted}`, retryDelayMs: 0, EventSourceImpl: browser.EventSource, fetchImpl: browser.fetch });
    const first = await browser.waitForSource(0);
    assert.equal(first.url, '/streams/msg_01/events?token=t1&from=0');
    for (const f of events.slice(0, 4)) first.emit(f);
    // The server ends the connection at the token's exp: the browser would reconnect with t1.
    first.nativeReconnect();
    assert.equal(first.readyState, 2, 'closed: not left to reconnect with the expired token');
    const second = await browser.waitForSource(1);
    assert.equal(second.url, '/streams/msg_01/events?token=t2&from=17', 'a fresh token, from the text held');
    // A connection that never opened backs off instead (a refusal is not a rejoin loop).
    second.nativeReconnect();
    assert.equal(browser.sources.length, 2, 'no immediate rejoin');
    const third = await browser.waitForSource(2);
    assert.equal(third.url, '/streams/msg_01/events?token=t3&from=17');
    third.emit({ type: 'open', streamId: 'msg_01', from: 17, seq: 45, durableSeq: 5, ended: false });
    third.emit({ type: 'chunk', from: 17, seq: 45, text: fx.expect.text.slice(17) });
    third.emit({ type: 'end', seq: 45, status: 'complete' });
    assert.equal((await handle.done).text, fx.expect.text, 'nothing missed');
  });

  test('close() stops following and resolves done with the state so far', async () => {
    const browser = fakeBrowser();
    const handle = followStream({ streamId: 'msg_01', EventSourceImpl: browser.EventSource, fetchImpl: browser.fetch });
    const es = await browser.waitForSource(0);
    assert.equal(es.url, '/streams/msg_01/events?from=0', 'no token, no token parameter');
    es.emit(events[0]);
    es.emit(events[1]);
    handle.close();
    assert.equal(es.readyState, 2);
    const final = await handle.done;
    assert.equal(final.text, 'Hi 👩');
    assert.equal(final.ended, false);
    handle.drop();
    await tick();
    assert.equal(browser.sources.length, 1, 'a closed handle does not reconnect');
  });

  test('an exception in the app’s onText is the app’s, not a stream fault to recover from', async () => {
    const browser = fakeBrowser();
    const handle = followStream({ streamId: 'msg_01', onText: () => { throw new Error('app bug'); }, EventSourceImpl: browser.EventSource, fetchImpl: browser.fetch });
    const es = await browser.waitForSource(0);
    es.emit(events[0]);
    assert.throws(() => es.emit(events[1]), /app bug/);
    assert.equal(handle.text, 'Hi 👩', 'the frame was still applied');
    assert.deepEqual(browser.fetches, [], 'no /text fallback');
    assert.equal(es.readyState, 1, 'still following');
    handle.close();
  });

  test('close() during a /text fallback wins: no rejoin afterwards', async () => {
    let answer;
    const browser = fakeBrowser();
    const fetchImpl = (url) => {
      browser.fetches.push(url);
      return new Promise((resolve) => { answer = resolve; });
    };
    const handle = followStream({ streamId: 'msg_01', retryDelayMs: 0, EventSourceImpl: browser.EventSource, fetchImpl });
    (await browser.waitForSource(0)).emit({ type: 'absent' });
    assert.equal(browser.fetches.length, 1);
    handle.close();
    answer({ ok: true, status: 200, json: async () => ({ text: 'late', seq: 4, status: 'streaming' }) });
    for (let i = 0; i < 20; i++) await tick();
    assert.equal(browser.sources.length, 1);
    assert.equal(handle.text, '', 'a superseded answer is ignored');
  });

  test('baseUrl, prefix and an id needing escapes', async () => {
    const browser = fakeBrowser([{ status: 200, body: { text: 'x', seq: 1, status: 'complete' } }]);
    const handle = followStream({ streamId: 'chat/1 a', token: 't&k', baseUrl: 'https://edge.test', prefix: '/s', EventSourceImpl: browser.EventSource, fetchImpl: browser.fetch });
    const es = await browser.waitForSource(0);
    assert.equal(es.url, 'https://edge.test/s/chat%2F1%20a/events?token=t%26k&from=0');
    es.emit({ type: 'absent' });
    await handle.done;
    assert.deepEqual(browser.fetches, ['https://edge.test/s/chat%2F1%20a/text?token=t%26k']);
  });

  test('rejoining is bounded: a row stuck in streaming ends in onError', async () => {
    const streaming = { status: 200, body: { text: 'Hi', seq: 2, status: 'streaming' } };
    const browser = fakeBrowser([streaming, streaming, streaming, { status: 403, body: { error: 'forbidden', message: 'no' } }]);
    const errors = [];
    const handle = followStream({ streamId: 'msg_01', token: 't', maxRetries: 3, retryDelayMs: 0, onError: (e) => errors.push(e), EventSourceImpl: browser.EventSource, fetchImpl: browser.fetch });
    for (let i = 0; i < 4; i++) (await browser.waitForSource(i)).emit({ type: 'absent' });
    await assert.rejects(handle.done, /gave up after 3 retries/);
    assert.equal(errors.length, 1);
    assert.equal(handle.text, 'Hi', 'the durable text read on the way is kept');
    assert.equal(browser.sources.length, 4);
    assert.deepEqual(browser.sources.slice(1).map((s) => fromOf(s.url)), ['2', '2', '2']);
    assert.ok(browser.sources.every((s) => s.readyState === 2));
  });

  test('rejoins are jittered: readers cut off together do not come back in lockstep', async (t) => {
    const delays = [];
    const realSetTimeout = globalThis.setTimeout;
    t.mock.method(globalThis, 'setTimeout', (fn, ms, ...args) => {
      delays.push(ms);
      return realSetTimeout(fn, 0, ...args);
    });
    for (let i = 0; i < 20; i++) {
      const browser = fakeBrowser([{ status: 200, body: { text: 'Hi', seq: 2, status: 'streaming' } }]);
      const handle = followStream({ streamId: 'msg_01', retryDelayMs: 1000, EventSourceImpl: browser.EventSource, fetchImpl: browser.fetch });
      (await browser.waitForSource(0)).emit({ type: 'absent' });
      const rejoin = await browser.waitForSource(1);
      assert.equal(fromOf(rejoin.url), '2', 'rejoins from the durable text it read');
      handle.close();
    }
    assert.equal(delays.length, 20, 'one backoff per reader');
    assert.ok(delays.every((d) => d >= 500 && d <= 1000), `first backoff within [500, 1000] ms: ${delays}`);
    assert.ok(new Set(delays).size > 10, `the 20 readers wait different times: ${delays}`);
  });
});

// ------------------------------------------------------------------ mock text

describe('mock text', () => {
  test('deterministic: same options, same tokens; another seed, another text', () => {
    assert.deepEqual(mockTokens({ seed: 3, tokens: 200 }), mockTokens({ seed: 3, tokens: 200 }));
    assert.notEqual(mockText({ seed: 3, tokens: 200 }), mockText({ seed: 4, tokens: 200 }));
    assert.equal(mockText({ seed: 3, tokens: 200 }), mockTokens({ seed: 3, tokens: 200 }).join(''));
    assert.equal(mockTokens().length, 120, 'defaults: 120 tokens');
    assert.deepEqual(mockTokens({ tokens: 0 }), []);
  });

  test('each token is a non-empty, well-formed string', () => {
    for (let seed = 0; seed < 50; seed++) {
      const tokens = mockTokens({ seed, tokens: 300 });
      assert.equal(tokens.length, 300);
      for (const t of tokens) assert.ok(t.length > 0 && t.isWellFormed(), `seed ${seed}: ${JSON.stringify(t)}`);
    }
  });

  test('the text is emoji-heavy and tricky, and tokens split grapheme clusters', () => {
    const tokens = mockTokens({ seed: 1, tokens: 400 });
    const text = tokens.join('');
    assert.match(text, /\u200d/u, 'ZWJ sequences');
    assert.match(text, /[\u{1F1E6}-\u{1F1FF}]{2}/u, 'flags');
    assert.match(text, /[\u{1F3FB}-\u{1F3FF}]/u, 'skin tones');
    assert.match(text, /\u0301|\u0303|\u0308|\u030a/u, 'combining marks');
    assert.match(text, /[\u4e00-\u9fff]/u, 'CJK');
    assert.match(text, /\n/, 'newlines');
    assert.ok(text.length > Array.from(text).length, 'astral characters (surrogate pairs)');
    assert.ok(tokens.some((t) => /^[\u200d\u0300-\u036f\u{1F3FB}-\u{1F3FF}]/u.test(t)), 'some token starts mid-cluster');
  });
});

// ------------------------------------------------------------------ mock model server

/**
 * Reads a whole SSE body with the tests' one parser (eventsource-parser): `{ event, data }` for
 * each dispatched event (`event` defaults to `message`, as in EventSource), how the body ended,
 * and the raw text after the last blank line (which never dispatches).
 */
async function readSse(res) {
  const events = [];
  const parser = sseParser((r) => r.data !== undefined && events.push({ event: r.event ?? 'message', data: r.data }), { json: false });
  const decoder = new TextDecoder();
  let raw = '';
  let error = null;
  try {
    for await (const bytes of res.body) {
      const text = decoder.decode(bytes, { stream: true });
      raw += text;
      parser.push(text);
    }
  } catch (err) {
    error = err;
  }
  raw += decoder.decode();
  const cut = raw.lastIndexOf('\n\n');
  return { events, error, tail: cut < 0 ? raw : raw.slice(cut + 2) };
}

/** The text each API's stream carries, exactly as a consumer of that API would extract it. */
const EXTRACT = {
  '/v1/chat/completions': (e) => (e.data === '[DONE]' ? '' : JSON.parse(e.data).choices?.[0]?.delta?.content ?? ''),
  '/v1/responses': (e) => (e.event === 'response.output_text.delta' ? JSON.parse(e.data).delta : ''),
  '/v1/messages': (e) => (e.event === 'content_block_delta' ? JSON.parse(e.data).delta.text : ''),
};
const textOf = (path, events) => events.map((e) => EXTRACT[path](e)).join('');
const tryJson = (s) => {
  try {
    return JSON.parse(s);
  } catch {
    return undefined;
  }
};

describe('mock model server', () => {
  let mock;
  before(async () => {
    mock = await startMockServer({ port: 0 });
  });
  after(() => mock.close());
  const post = (path, query, init = {}) => fetch(`${mock.url}${path}?${query}`, { method: 'POST', body: '{"stream":true}', ...init });
  const requests = async () => (await fetch(`${mock.url}/_mock/requests`)).json();

  test('listens on 127.0.0.1 and records requests without header values', async () => {
    assert.match(mock.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    await fetch(`${mock.url}/_mock/reset`, { method: 'POST' });
    await readSse(await post('/v1/messages', 'tokens=3&rate=0', { headers: { 'x-api-key': 'secret-key' } }));
    await readSse(await post('/v1/chat/completions', 'tokens=3&rate=0'));
    const log = await requests();
    assert.equal(log.length, 2);
    assert.deepEqual(log.map((r) => r.authorization), [true, false]);
    assert.deepEqual(log[0].query, { tokens: '3', rate: '0' });
    assert.deepEqual(log[0].body, { stream: true });
    assert.ok(!JSON.stringify(log).includes('secret-key'), 'never the value');
    await fetch(`${mock.url}/_mock/reset`, { method: 'POST' });
    assert.deepEqual(await requests(), []);
  });

  for (const path of Object.keys(EXTRACT)) {
    test(`${path} streams exactly mockText`, async () => {
      const res = await post(path, 'tokens=150&rate=0&seed=7', { headers: { authorization: 'Bearer mock-key' } });
      assert.equal(res.status, 200);
      assert.match(res.headers.get('content-type'), /^text\/event-stream/);
      const { events, error, tail } = await readSse(res);
      assert.equal(error, null);
      assert.equal(tail, '');
      assert.equal(textOf(path, events), mockText({ seed: 7, tokens: 150 }));
      for (const e of events) if (e.data !== '[DONE]') assert.ok(tryJson(e.data) !== undefined, `JSON: ${e.data}`);
      if (path === '/v1/chat/completions') {
        assert.equal(JSON.parse(events[0].data).choices[0].delta.role, 'assistant');
        assert.equal(JSON.parse(events.at(-2).data).choices[0].finish_reason, 'stop');
        assert.equal(events.at(-1).data, '[DONE]');
        assert.ok(events.slice(0, -1).every((e) => JSON.parse(e.data).object === 'chat.completion.chunk'));
      } else {
        for (const e of events) assert.equal(JSON.parse(e.data).type, e.event, 'event name matches data.type');
        const names = events.map((e) => e.event);
        if (path === '/v1/responses') {
          assert.deepEqual([names[0], names.at(-1)], ['response.created', 'response.completed']);
          assert.equal(JSON.parse(events.at(-1).data).response.output[0].content[0].text, mockText({ seed: 7, tokens: 150 }));
        } else {
          assert.deepEqual(names.slice(0, 2), ['message_start', 'content_block_start']);
          assert.deepEqual(names.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
          assert.ok(names.filter((n) => n === 'ping').length >= 2, 'pings are interleaved');
        }
      }
    });
  }

  // What a consumer of each API reads from a stream: reasoning, text, the tool call (name, id,
  // its streamed input and the input the API repeats at the end), the finish reason, the usage.
  const READ_ANSWER = {
    '/v1/chat/completions': (events) => {
      const chunks = events.filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
      const deltas = chunks.map((c) => c.choices[0]?.delta ?? {});
      const calls = deltas.flatMap((d) => d.tool_calls ?? []);
      return {
        reasoning: deltas.map((d) => d.reasoning_content ?? '').join(''),
        text: deltas.map((d) => d.content ?? '').join(''),
        tool: calls.length ? { name: calls[0].function.name, id: calls[0].id, input: calls.map((c) => c.function.arguments).join(''), indexes: [...new Set(calls.map((c) => c.index))] } : null,
        finish: chunks.map((c) => c.choices[0]?.finish_reason).find(Boolean),
        usage: chunks.find((c) => c.usage)?.usage ?? null,
        last: events.at(-1).data,
      };
    },
    '/v1/responses': (events) => {
      const of = (type) => events.filter((e) => e.event === type).map((e) => JSON.parse(e.data));
      const call = of('response.output_item.added').find((e) => e.item.type === 'function_call')?.item;
      const completed = of('response.completed')[0].response;
      return {
        reasoning: of('response.reasoning_summary_text.delta').map((e) => e.delta).join(''),
        text: of('response.output_text.delta').map((e) => e.delta).join(''),
        tool: call ? {
          name: call.name, id: call.call_id, input: of('response.function_call_arguments.delta').map((e) => e.delta).join(''),
          done: of('response.function_call_arguments.done')[0].arguments, sameItem: of('response.function_call_arguments.delta').every((e) => e.item_id === call.id),
        } : null,
        output: completed.output.map((item) => item.type),
        usage: completed.usage,
        sequence: events.map((e) => JSON.parse(e.data).sequence_number),
      };
    },
    '/v1/messages': (events) => {
      const all = events.map((e) => JSON.parse(e.data));
      const deltas = all.filter((e) => e.type === 'content_block_delta');
      const blocks = all.filter((e) => e.type === 'content_block_start').map((e) => ({ index: e.index, ...e.content_block }));
      const tool = blocks.find((b) => b.type === 'tool_use');
      return {
        reasoning: deltas.filter((d) => d.delta.type === 'thinking_delta').map((d) => d.delta.thinking).join(''),
        text: deltas.filter((d) => d.delta.type === 'text_delta').map((d) => d.delta.text).join(''),
        tool: tool ? { name: tool.name, id: tool.id, input: deltas.filter((d) => d.index === tool.index).map((d) => d.delta.partial_json).join('') } : null,
        blocks: blocks.map((b) => `${b.index}:${b.type}`),
        // The signature comes last in the thinking block, before its stop.
        signedBeforeStop: all.findIndex((e) => e.delta?.type === 'signature_delta') === all.findIndex((e) => e.type === 'content_block_stop' && e.index === 0) - 1,
        finish: all.find((e) => e.type === 'message_delta').delta.stop_reason,
        usage: all.find((e) => e.type === 'message_delta').usage,
      };
    },
  };

  test('reasoning=N&tool=NAME: each API streams mockAnswer’s reasoning, text and tool call in its own shapes', async () => {
    const answer = mockAnswer({ seed: 9, tokens: 30, reasoning: 12, tool: 'get_weather' });
    const [reasoning, text, input] = [answer.reasoningTokens.join(''), answer.textTokens.join(''), JSON.stringify(answer.tool.input)];
    const outputTokens = 12 + 30 + answer.tool.pieces.length;
    const read = async (path, query) => READ_ANSWER[path]((await readSse(await post(path, query))).events);

    const chat = await read('/v1/chat/completions', 'tokens=30&seed=9&rate=0&reasoning=12&tool=get_weather&usage=1');
    assert.deepEqual([chat.reasoning, chat.text, chat.tool.name, chat.tool.input, chat.tool.indexes], [reasoning, text, 'get_weather', input, [0]]);
    assert.match(chat.tool.id, /^call_/);
    assert.equal(chat.finish, 'tool_calls');
    assert.deepEqual([chat.usage.completion_tokens, chat.usage.completion_tokens_details.reasoning_tokens, chat.last], [outputTokens, 12, '[DONE]']);

    const responses = await read('/v1/responses', 'tokens=30&seed=9&rate=0&reasoning=12&tool=get_weather');
    assert.deepEqual([responses.reasoning, responses.text, responses.tool.name, responses.tool.input, responses.tool.done], [reasoning, text, 'get_weather', input, input]);
    assert.ok(responses.tool.sameItem && /^call_/.test(responses.tool.id));
    assert.deepEqual(responses.output, ['reasoning', 'message', 'function_call']);
    assert.deepEqual([responses.usage.output_tokens, responses.usage.output_tokens_details.reasoning_tokens], [outputTokens, 12]);
    assert.deepEqual(responses.sequence, responses.sequence.map((_, i) => i), 'sequence_number counts every event');

    const anthropic = await read('/v1/messages', 'tokens=30&seed=9&rate=0&reasoning=12&tool=get_weather');
    assert.deepEqual([anthropic.reasoning, anthropic.text, anthropic.tool.name, anthropic.tool.input], [reasoning, text, 'get_weather', input]);
    assert.match(anthropic.tool.id, /^toolu_/);
    assert.deepEqual(anthropic.blocks, ['0:thinking', '1:text', '2:tool_use']);
    assert.ok(anthropic.signedBeforeStop);
    assert.deepEqual([anthropic.finish, anthropic.usage.output_tokens], ['tool_use', outputTokens]);
  });

  test('without the options the answers are text only; chat usage follows the body’s stream_options', async () => {
    const read = async (path, query, body) => READ_ANSWER[path]((await readSse(await post(path, query, body && { body }))).events);
    for (const path of Object.keys(READ_ANSWER)) {
      const plain = await read(path, 'tokens=20&seed=4&rate=0');
      assert.deepEqual([plain.reasoning, plain.text, plain.tool], ['', mockText({ seed: 4, tokens: 20 }), null], path);
    }
    assert.equal((await read('/v1/chat/completions', 'tokens=5&rate=0')).usage, null, 'no usage unless asked');
    const asked = await read('/v1/chat/completions', 'tokens=5&rate=0', JSON.stringify({ stream: true, stream_options: { include_usage: true } }));
    assert.deepEqual([asked.usage.completion_tokens, asked.finish], [5, 'stop']);
    assert.equal((await read('/v1/messages', 'tokens=5&rate=0')).finish, 'end_turn');
  });

  test('fail=error sends each API’s own error event at failAt, then ends', async () => {
    const expectTail = {
      '/v1/chat/completions': (e) => e.event === 'message' && JSON.parse(e.data).error?.type === 'server_error',
      '/v1/responses': (e) => e.event === 'error' && JSON.parse(e.data).type === 'error',
      '/v1/messages': (e) => e.event === 'error' && JSON.parse(e.data).error.type === 'overloaded_error',
    };
    for (const path of Object.keys(EXTRACT)) {
      const { events, error } = await readSse(await post(path, 'tokens=40&rate=0&fail=error&failAt=10'));
      assert.equal(error, null);
      assert.ok(expectTail[path](events.at(-1)), `${path}: ${JSON.stringify(events.at(-1))}`);
      assert.equal(textOf(path, events.slice(0, -1)), mockTokens({ tokens: 40 }).slice(0, 10).join(''));
    }
  });

  test('fail=drop destroys the socket midway (default failAt: half)', async () => {
    for (const path of Object.keys(EXTRACT)) {
      const { events, error } = await readSse(await post(path, 'tokens=40&rate=0&fail=drop'));
      assert.ok(error, `${path}: the body read fails`);
      assert.equal(textOf(path, events), mockTokens({ tokens: 40 }).slice(0, 20).join(''));
    }
    const last = (await requests()).at(-1);
    assert.deepEqual([last.tokensSent, last.completed, last.aborted, last.fail], [20, false, false, 'drop']);
  });

  test('fail=malformed sends one non-JSON data line, then carries on', async () => {
    for (const path of Object.keys(EXTRACT)) {
      const { events } = await readSse(await post(path, 'tokens=30&rate=0&fail=malformed&failAt=5'));
      const bad = events.filter((e) => e.data !== '[DONE]' && tryJson(e.data) === undefined);
      assert.equal(bad.length, 1, path);
      const good = events.filter((e) => e !== bad[0]);
      assert.equal(textOf(path, good), mockText({ tokens: 30 }), path);
    }
  });

  test('fail=http500 answers 500 with the API’s JSON error at once', async () => {
    for (const path of Object.keys(EXTRACT)) {
      const res = await post(path, 'fail=http500');
      assert.equal(res.status, 500);
      const body = await res.json();
      assert.ok(path === '/v1/messages' ? body.type === 'error' && body.error.type === 'api_error' : body.error.type === 'server_error');
    }
  });

  test('a client that goes away midway is recorded as aborted', async () => {
    await fetch(`${mock.url}/_mock/reset`, { method: 'POST' });
    const controller = new AbortController();
    const res = await post('/v1/chat/completions', 'tokens=200&rate=50', { signal: controller.signal });
    const reader = res.body.getReader();
    await reader.read();
    controller.abort();
    await reader.read().catch(() => {});
    const log = await until(async () => {
      const l = await requests();
      return l[0]?.aborted && l;
    }, 'the mock to record the abort', 10_000);
    assert.equal(log[0].completed, false);
    assert.ok(log[0].tokensSent < 200);
    const sent = log[0].tokensSent;
    // A witness at the same rate: once its 5 tokens are out, the mock's timers have ticked 5
    // times since, so a producer that kept going would have sent more.
    await readSse(await post('/v1/chat/completions', 'tokens=5&rate=50'));
    assert.equal((await requests())[0].tokensSent, sent, 'the mock stops producing once the client is gone');
  });

  test('a hold stops the answer before text token `at` until released; other seeds are not held', async () => {
    await fetch(`${mock.url}/_mock/reset`, { method: 'POST' });
    assert.equal((await fetch(`${mock.url}/_mock/hold?seed=31&at=12`, { method: 'POST' })).status, 200);
    const held = await post('/v1/messages', 'tokens=30&rate=0&seed=31');
    const other = await readSse(await post('/v1/messages', 'tokens=30&rate=0&seed=32'));
    assert.equal(textOf('/v1/messages', other.events), mockText({ seed: 32, tokens: 30 }), 'another seed runs through');
    const record = await until(async () => (await requests()).find((r) => r.query.seed === '31' && r.held), 'the seed-31 request to reach its hold');
    assert.equal(record.tokensSent, 12, 'stopped before text token 12');
    assert.equal(record.completed, false);
    assert.equal((await fetch(`${mock.url}/_mock/release?seed=31`, { method: 'POST' })).status, 200);
    const { events, error } = await readSse(held);
    assert.equal(error, null);
    assert.equal(textOf('/v1/messages', events), mockText({ seed: 31, tokens: 30 }), 'after the release the answer goes on to its end');
    const after = (await requests()).find((r) => r.query.seed === '31');
    assert.deepEqual([after.held, after.completed, after.tokensSent], [false, true, 30]);
  });

  test('unknown paths are a JSON 404', async () => {
    const res = await fetch(`${mock.url}/v1/nope`, { method: 'POST' });
    assert.equal(res.status, 404);
    assert.ok((await res.json()).error);
  });
});
