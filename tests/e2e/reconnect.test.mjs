// A real EventSource client (the `eventsource` package) is cut off mid-stream by a proxy
// that destroys its socket, and must resume BY ITSELF with Last-Event-ID (SPEC §3: `open`
// and `chunk` carry `id:` lines, Last-Event-ID wins over `from`), ending with exactly the
// produced text, then close itself on `end`.
import test from 'node:test';
import assert from 'node:assert/strict';
import { EventSource } from 'eventsource';
import { startStack } from './harness.mjs';
import { api, emojiText, newStream, ok, rng, seedFromEnv, sleep, splitCodePoints, startProxy, until, withTimeout } from './util.mjs';

let stack;

test.before(async () => {
  stack = await startStack({ name: 'e2e-reconnect' });
});
test.after(async () => {
  await stack?.stop();
});

/**
 * Runs one EventSource against `url` and rebuilds the text from its chunk frames, asserting
 * contiguity on the fly. Resolves on `end` (after closing the EventSource itself).
 */
function eventSourceReader(url) {
  const state = { text: '', opens: [], chunks: 0, errors: 0, lastEventIds: [], end: undefined, problems: [] };
  let es;
  state.done = new Promise((resolve) => {
    es = new EventSource(url);
    state.es = es;
    es.addEventListener('error', () => {
      state.errors += 1;
    });
    es.addEventListener('message', (ev) => {
      let f;
      try {
        f = JSON.parse(ev.data);
      } catch {
        state.problems.push(`non-JSON data ${ev.data}`);
        return;
      }
      state.lastEventIds.push(ev.lastEventId);
      if (f.type === 'open') {
        state.opens.push(f);
        if (f.from !== state.text.length) state.problems.push(`open from ${f.from} but the client holds ${state.text.length} units`);
      } else if (f.type === 'chunk') {
        state.chunks += 1;
        if (f.from !== state.text.length) state.problems.push(`chunk from ${f.from} but the client holds ${state.text.length} units (gap or double)`);
        if (f.text.length !== f.seq - f.from) state.problems.push(`chunk [${f.from},${f.seq}) has ${f.text.length} units`);
        if (ev.lastEventId !== String(f.seq)) state.problems.push(`chunk lastEventId ${ev.lastEventId} != seq ${f.seq}`);
        // Splice by offset (as a careful client would) so a doubled delivery shows as a problem, not as garbage.
        state.text = state.text.slice(0, f.from) + f.text;
      } else if (f.type === 'end') {
        state.end = f;
        es.close(); // SPEC §3: a reader must close its EventSource on `end`
        resolve(state);
      } else if (f.type === 'absent' || f.type === 'stale') {
        state.problems.push(`unexpected ${ev.data}`);
        es.close();
        resolve(state);
      }
    });
  });
  return state;
}

test('EventSource cut off mid-stream reconnects by itself with Last-Event-ID and ends with exactly the produced text', { timeout: 60_000 }, async (t) => {
  const seed = seedFromEnv();
  t.diagnostic(`seed ${seed} (E2E_SEED=${seed} replays the text, the pieces and the join points)`);
  const r = rng(seed);
  const id = newStream(stack, 'es');
  const s = api(stack, id);
  ok(await s.open(), 'open');

  const produced = emojiText(r, 3000);
  const pieces = splitCodePoints(produced, r, 5, 60);
  assert.ok(pieces.length >= 60, `${pieces.length} pieces`);

  const proxy = await startProxy(stack.baseUrl);
  try {
    // from=0 stays in the URL on every reconnect: only Last-Event-ID can put the client right.
    const reader = eventSourceReader(`${proxy.url}/streams/${id}/events?from=0&token=${encodeURIComponent(s.token)}`);

    // Phase A: the client reads live. Phase B: it is cut off and the producer keeps going.
    // Phase C: after the EventSource has reconnected on its own, the rest arrives live.
    const third = Math.floor(pieces.length / 3);
    let sent = 0;
    const push = async (i) => {
      const rec = ok(await s.append(pieces[i]), `append ${i}`);
      sent += pieces[i].length;
      assert.equal(rec.seq, sent, 'append seq is the produced UTF-16 length');
      await sleep(10);
    };
    let i = 0;
    for (; i < third; i++) await push(i);
    // Let the client catch up with at least a few chunks before the cut.
    await until(() => reader.text.length >= sent && reader.chunks >= 5, () => `the client to catch up before the cut (${reader.chunks} chunks)`);
    // The last id the client saw: a `durable` frame carries none (the eventsource package
    // gives such a message an empty lastEventId, while the connection keeps the chunk's).
    const cutAt = { held: reader.text.length, lastId: reader.lastEventIds.filter(Boolean).at(-1), sent };
    assert.ok(proxy.cut() >= 1, 'the client had a live connection to cut');
    for (; i < 2 * third; i++) await push(i);
    await until(() => reader.opens.length >= 2, () => `the EventSource to reconnect (requests ${proxy.requests.length}, errors ${reader.errors})`, 15_000);
    for (; i < pieces.length; i++) await push(i);
    assert.equal(sent, produced.length);
    const closed = ok(await s.close(), 'close');
    assert.equal(closed.status, 'complete');
    assert.equal(closed.seq, produced.length);

    const result = await withTimeout(
      reader.done,
      20_000,
      () => `no end within 20 s; client holds ${reader.text.length}/${produced.length}, requests ${proxy.requests.length}`,
    );

    assert.deepEqual(result.problems, [], `seed ${seed}`);
    assert.ok(result.errors >= 1, 'the EventSource saw its connection drop');
    assert.equal(result.es.readyState, EventSource.CLOSED, 'the client closed itself on end');
    assert.ok(proxy.requests.length >= 2, `the EventSource reconnected (requests: ${proxy.requests.length})`);
    assert.equal(proxy.requests[0].headers['last-event-id'], undefined, 'the first request has no Last-Event-ID');
    const resumed = proxy.requests[1];
    assert.equal(resumed.headers['last-event-id'], cutAt.lastId, 'the reconnect carries the last id the client saw');
    assert.equal(resumed.headers['last-event-id'], String(cutAt.held), 'that id is exactly the UTF-16 length the client held');
    assert.match(resumed.url, /[?&]from=0(&|$)/, 'the reconnect URL still says from=0 (Last-Event-ID must win)');
    assert.equal(result.opens.length, proxy.requests.length, 'one open frame per connection');
    assert.equal(result.opens[1].from, cutAt.held, 'the second subscription starts where the client left off');
    assert.equal(result.end.seq, produced.length);
    assert.equal(result.end.status, 'complete');
    assert.equal(result.text.length, produced.length, `seed ${seed}: length`);
    assert.ok(result.text === produced, `seed ${seed}: the rebuilt text differs from the produced text`);

  } finally {
    await proxy.close();
  }
});
