// The readers that ship, against the real runtime: a reader that ends holds exactly the
// durable text (the row is the truth once a stream has ended).
//
// public/client.js, with a real EventSource (the `eventsource` package): whether the end comes
// live (`end`, whose `seq` is the durable length) or through /text after the object lost the
// stream, it ends with the durable text, even when it was shown more live.
//
// public/chat-transport.js (its reader, `readUIStream`, which RindleChatTransport returns to the
// AI SDK): a UI message cannot un-render chunks it was given, so when the lines it was shown go
// past the durable length the stream ended with (a live seal that fell short; the object lost with
// an unsaved tail, sealed `interrupted` by the lease), its stream ends with an `error` chunk that
// says what was saved, and a reload gets exactly the durable lines and the row's ending.
//
// Then the fixture recorder runs into a temp dir and every fresh recording replays through
// client.js like the committed ones.
import test from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { EventSource } from 'eventsource';
import { assembleDurableText, followStream } from '../../public/client.js';
import { readUIStream } from '../../public/chat-transport.js';
import { startStack } from './harness.mjs';
import { api, durableFromDb, ndjson, newStream, ok, uiChunksOf, uiMessageOf, until } from './util.mjs';
import { recordFixtures, RECORDER_VARS, STALE_VARS } from '../client/record-fixtures.mjs';
import { assertFollowed, loadFixtures, replay, streamCases } from '../client/replay.mjs';

let stack;

test.before(async () => {
  stack = await startStack({ name: 'e2e-client', vars: RECORDER_VARS });
});
test.after(async () => {
  await stack?.stop();
});

/** `until(n)` resolves once `size()` is at least n; call `grew()` whenever it may have grown. */
function growth(size) {
  const waiters = [];
  return {
    grew: () => {
      for (const w of waiters.splice(0)) w();
    },
    until: (n) =>
      new Promise((resolve) => {
        const check = () => (size() >= n ? resolve() : waiters.push(check));
        check();
      }),
  };
}

/**
 * Follows stream `id` with client.js; `texts` collects every onText. `untilText(n)` resolves
 * once the reader holds at least n UTF-16 units.
 */
function follow(id, options = {}) {
  const texts = [];
  const held = growth(() => handle.text.length);
  const handle = followStream({
    streamId: id,
    token: stack.token(id, 'read'),
    baseUrl: stack.baseUrl,
    EventSourceImpl: EventSource,
    onText: (text) => {
      texts.push(text);
      held.grew();
    },
    ...options,
  });
  return { handle, texts, untilText: held.until };
}

/** D1 refuses to change this row's status (a seal, or the lease's repair) until `drop()`. */
function refuseSeal(id) {
  const name = `e2e_refuse_seal_${id}`;
  stack.db.exec(`CREATE TRIGGER "${name}" BEFORE UPDATE ON messages WHEN NEW.id = '${id}' AND NEW.status <> 'streaming' BEGIN SELECT RAISE(ABORT, 'e2e: seal refused'); END;`);
  return { drop: () => stack.db.exec(`DROP TRIGGER IF EXISTS "${name}"`) };
}

test('live end short of what was shown: the reader ends holding exactly the durable text, end.seq long', { timeout: 60_000 }, async () => {
  const id = newStream(stack, 'client-end');
  const s = api(stack, id);
  ok(await s.open(), 'open');
  const reader = follow(id);
  ok(await s.append('kept 👩‍💻 '), 'append');
  const durableSeq = ok(await s.flush(), 'flush').durableSeq;
  ok(await s.append('shown live, never durable 🇯🇵'), 'append');
  const shown = 'kept 👩‍💻 shown live, never durable 🇯🇵';
  await reader.untilText(shown.length);
  const hold = refuseSeal(id);
  try {
    const close = await s.close();
    assert.equal(close.status, 503, `close with the seal refused: ${close.raw}`);
    const final = await reader.handle.done;
    const durable = durableFromDb(stack.db, id);
    assert.equal(durable.text, 'kept 👩‍💻 ', 'what D1 holds');
    assert.equal(final.text, durable.text, 'the reader ends with exactly the durable text');
    assert.equal(final.seq, durableSeq);
    assert.equal(final.durableSeq, durableSeq);
    assert.ok(reader.texts.includes(shown), 'it had been shown the longer text live');
    assert.equal(reader.texts.at(-1), durable.text, 'its last onText is the durable text');
  } finally {
    hold.drop();
  }
});

test('/text recovery from a terminal row: after a kill the reader ends with the interrupted row, not its longer live text', { timeout: 90_000 }, async () => {
  const id = newStream(stack, 'client-evicted');
  const s = api(stack, id);
  ok(await s.open(), 'open');
  const reader = follow(id, { maxRetries: 10 });
  ok(await s.append('durable 🦀 '), 'append');
  ok(await s.flush(), 'flush');
  ok(await s.append('only ever live'), 'append');
  await reader.untilText('durable 🦀 only ever live'.length);
  await stack.kill(); // the object loses the stream; the lease seals the row from D1 after the restart
  await stack.restart();
  const final = await reader.handle.done;
  const durable = durableFromDb(stack.db, id);
  assert.equal(durable.row.status, 'interrupted');
  assert.equal(final.status, 'interrupted');
  assert.equal(final.text, 'durable 🦀 ', 'the reader ends with exactly the terminal row');
  assert.equal(final.text, durable.text);
  assert.equal(final.seq, final.text.length);
});

// ---- the AI SDK transport's reader (chat-transport.js)

/** The `error` ending of a reader shown lines past the durable length (docs/API.md, "The `ui` format and `GET /ui`"). */
const unsaved = ({ status, durable, shown, error }) => ({
  type: 'error',
  errorText: `only part of the answer shown was saved (${durable} of ${shown} UTF-16 units): the stream ended ${status}${error ? `: ${error}` : ''}; reload to see the saved answer`,
});

/** An answer's NDJSON in two parts: `kept` (to be flushed) and `tail` (shown live only). */
function answerParts(id) {
  const kept = ndjson([
    { type: 'start', messageId: id },
    { type: 'text-start', id: 't' },
    { type: 'text-delta', id: 't', delta: 'kept 👩🏽‍💻 東京 ' },
  ]);
  const tail = ndjson([
    { type: 'text-delta', id: 't', delta: 'shown live, never durable 🇯🇵' },
    { type: 'text-end', id: 't' },
  ]);
  return { kept, tail };
}

/**
 * Reads `id`'s /ui with the transport's reader; `chunks` fills as they arrive, `untilChunks(n)`
 * waits for n of them, `done` resolves with all of them once the stream ends.
 */
function readUi(id) {
  const chunks = [];
  const got = growth(() => chunks.length);
  const stream = readUIStream({
    streamId: id,
    token: stack.token(id, 'read'),
    streamsUrl: stack.baseUrl,
    // Reconnect quickly and never give up here: the ending must be the server's.
    retry: { initialDelayMs: 100, maxDelayMs: 500, giveUpAfterMs: 120_000 },
  });
  const done = (async () => {
    for await (const chunk of stream) {
      chunks.push(chunk);
      got.grew();
    }
    return chunks;
  })();
  return { chunks, untilChunks: got.until, done };
}

test('transport: a live end short of what was shown ends its stream with an error that says what was saved', { timeout: 60_000 }, async () => {
  const id = newStream(stack, 'ui-short');
  const s = api(stack, id);
  ok(await s.open(undefined, 'ui'), 'open');
  const { kept, tail } = answerParts(id);
  const reader = readUi(id);
  ok(await s.append(kept), 'append');
  assert.equal(ok(await s.flush(), 'flush').durableSeq, kept.length);
  ok(await s.append(tail), 'append the tail');
  const shownChunks = [...uiChunksOf(kept), ...uiChunksOf(tail)];
  await reader.untilChunks(shownChunks.length);
  const hold = refuseSeal(id);
  try {
    assert.equal((await s.close()).status, 503, 'the seal could not commit');
    const chunks = await reader.done;
    const ending = unsaved({ status: 'complete', durable: kept.length, shown: kept.length + tail.length });
    assert.deepEqual(chunks, [...shownChunks, ending], 'every line shown, then the error that says what was saved');
    const { errors } = await uiMessageOf(chunks);
    assert.deepEqual(errors, [ending.errorText], 'the AI SDK reports it (useChat shows status "error")');
    assert.equal(durableFromDb(stack.db, id).text, kept, 'what D1 holds');
  } finally {
    hold.drop();
  }
  // The lease repairs the producer's seal from the lingering stream: now everything shown is
  // saved, and a reload gets every line and the usual ending.
  await until(() => durableFromDb(stack.db, id).row.status === 'complete', 'the lease to repair the seal', 15_000);
  assert.deepEqual(await readUi(id).done, [...shownChunks, { type: 'finish' }]);
});

test('transport: after a kill the stream ends with the lease\'s interrupted error; shown past the durable text, the error says what was saved; a reload gets exactly the durable lines', { timeout: 90_000 }, async () => {
  // Two answers cut by the same kill: one all flushed, one with a tail that was only shown live.
  const answers = [];
  for (const flushTail of [true, false]) {
    const id = newStream(stack, flushTail ? 'ui-kill-saved' : 'ui-kill-tail');
    const s = api(stack, id);
    ok(await s.open(undefined, 'ui'), 'open');
    const { kept, tail } = answerParts(id);
    const reader = readUi(id);
    ok(await s.append(kept), 'append');
    ok(await s.flush(), 'flush');
    ok(await s.append(tail), 'append the tail');
    if (flushTail) ok(await s.flush(), 'flush the tail');
    answers.push({ id, kept, tail, flushTail, reader, shownChunks: [...uiChunksOf(kept), ...uiChunksOf(tail)] });
  }
  for (const a of answers) await a.reader.untilChunks(a.shownChunks.length);
  await stack.kill(); // the object loses both streams; the lease seals their rows after the restart
  await stack.restart();

  for (const { id, kept, tail, flushTail, reader, shownChunks } of answers) {
    const label = flushTail ? 'everything saved' : 'an unsaved tail';
    const chunks = await reader.done;
    const { row, text } = durableFromDb(stack.db, id);
    assert.equal(row.status, 'interrupted', label);
    assert.equal(text, flushTail ? kept + tail : kept, `${label}: what D1 holds`);
    const ending = flushTail
      ? { type: 'error', errorText: row.error }
      : unsaved({ status: 'interrupted', durable: kept.length, shown: kept.length + tail.length, error: row.error });
    assert.deepEqual(chunks, [...shownChunks, ending], `${label}: every line shown, then the ending`);

    // A reload (the transport replays from 0) gets exactly the durable lines and the row's ending.
    const reloaded = await readUi(id).done;
    assert.deepEqual(reloaded, [...uiChunksOf(text), { type: 'error', errorText: row.error }], `${label}: the reload`);
    assert.deepEqual((await uiMessageOf(reloaded)).message, (await uiMessageOf(uiChunksOf(text))).message, `${label}: the reloaded message is the durable one`);
  }
});

test('the fixture recorder runs against the real runtime, and client.js follows every fresh recording', { timeout: 180_000 }, async (t) => {
  const staleStack = await startStack({ name: 'e2e-client-stale', vars: STALE_VARS });
  const dir = mkdtempSync(join(os.tmpdir(), 'rindle-fixtures-'));
  try {
    const names = await recordFixtures(stack, staleStack, dir, (line) => t.diagnostic(line));
    assert.deepEqual(readdirSync(dir).sort(), [...names].sort());
    const fixtures = loadFixtures(dir);
    const cases = streamCases(fixtures);
    assert.ok(cases.length >= 12, `${cases.length} recorded streams`);
    for (const { name, fx } of cases) {
      t.diagnostic(`replaying the fresh ${name}`);
      assertFollowed(fx, await replay(fx));
    }
    for (const r of fixtures['durable-rows'].rows) assert.equal(assembleDurableText(r.body, r.chunks), r.text, r.what);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await staleStack.stop();
  }
});
