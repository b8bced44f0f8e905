// A real EventSource client (the `eventsource` package) is cut off mid-stream by a proxy
// that destroys its socket, and must resume BY ITSELF with Last-Event-ID (SPEC §3: `open`
// and `chunk` carry `id:` lines, Last-Event-ID wins over `from`), ending with exactly the
// produced text, then close itself on `end`. The cuts fall at seeded places on the wire (after
// event k, half of them inside the next event), exactly 3 of them; the test is the producer and
// appends in step with the client, so every cut is reached before the stream is closed.
// E2E_SEED=<seed> replays the text, its pieces and the cuts.
import test from 'node:test';
import assert from 'node:assert/strict';
import { EventSource } from 'eventsource';
import { startStack } from './harness.mjs';
import { api, emojiText, newStream, ok, planCuts, rng, seedFromEnv, splitCodePoints, startProxy, until, withTimeout } from './util.mjs';

const CUTS = 3;

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

test(`EventSource cut off mid-stream exactly ${CUTS} times reconnects by itself with Last-Event-ID and ends with exactly the produced text`, { timeout: 60_000 }, async (t) => {
  const seed = seedFromEnv();
  t.diagnostic(`seed ${seed} (E2E_SEED=${seed} replays the text, the pieces and the cuts)`);
  const why = (msg) => `${msg} (E2E_SEED=${seed})`;
  const r = rng(seed);
  const id = newStream(stack, 'es');
  const s = api(stack, id);
  ok(await s.open(), 'open');

  const produced = emojiText(r, 3000);
  const pieces = splitCodePoints(produced, r, 5, 60);
  assert.ok(pieces.length >= 60, `${pieces.length} pieces`);
  // Every piece is at least one event of the connection it arrives on: half of them cover the cuts.
  const plan = planCuts(r, { cuts: CUTS, budget: Math.floor(pieces.length / 2) });

  const proxy = await startProxy(stack.baseUrl, { cuts: plan });
  try {
    // from=0 stays in the URL on every reconnect: only Last-Event-ID can put the client right.
    const reader = eventSourceReader(`${proxy.url}/streams/${id}/events?from=0&token=${encodeURIComponent(s.readToken)}`);

    // The test is the producer: each piece goes once the client holds everything before it
    // (after a cut, once the EventSource has reconnected by itself and caught up).
    let sent = 0;
    for (const [i, piece] of pieces.entries()) {
      const rec = ok(await s.append(piece), `append ${i}`);
      sent += piece.length;
      assert.equal(rec.seq, sent, 'append seq is the produced UTF-16 length');
      await until(() => reader.text.length === sent, () => why(`the client to hold the ${sent} units sent (it holds ${reader.text.length}; cuts ${proxy.cuts}, requests ${proxy.requests.length}, errors ${reader.errors})`), 15_000);
    }
    assert.equal(proxy.cuts, CUTS, why(`cuts made before the close (plan ${JSON.stringify(plan)})`));
    const closed = ok(await s.close(), 'close');
    assert.equal(closed.status, 'complete');
    assert.equal(closed.seq, produced.length);

    const result = await withTimeout(
      reader.done,
      20_000,
      () => `no end within 20 s; client holds ${reader.text.length}/${produced.length}, requests ${proxy.requests.length}`,
    );

    assert.deepEqual(result.problems, [], why('problems'));
    assert.equal(result.errors, CUTS, 'the EventSource saw each cut');
    assert.equal(result.es.readyState, EventSource.CLOSED, 'the client closed itself on end');
    assert.equal(proxy.requests.length, CUTS + 1, 'one reconnect per cut');
    assert.equal(proxy.requests[0].headers['last-event-id'], undefined, 'the first request has no Last-Event-ID');
    for (const [i, cut] of proxy.cutLog.entries()) {
      const resumed = proxy.requests[i + 1];
      assert.equal(resumed.headers['last-event-id'], cut.lastId, why(`reconnect ${i + 1} carries the id of the last event the client got whole (${JSON.stringify(cut)})`));
      assert.match(resumed.url, /[?&]from=0(&|$)/, 'the reconnect URL still says from=0 (Last-Event-ID must win)');
      assert.equal(result.opens[i + 1].from, Number(cut.lastId), why(`subscription ${i + 2} starts where the client left off`));
    }
    assert.equal(result.opens.length, proxy.requests.length, 'one open frame per connection');
    assert.equal(result.end.seq, produced.length);
    assert.equal(result.end.status, 'complete');
    assert.equal(result.text.length, produced.length, why('length'));
    assert.ok(result.text === produced, why('the rebuilt text differs from the produced text'));
  } finally {
    await proxy.close();
  }
});
