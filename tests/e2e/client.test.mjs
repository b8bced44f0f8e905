// public/client.js against the real runtime, with a real EventSource (the `eventsource` package):
// a reader that ends holds exactly the durable text, whether the end comes live (`end`, whose
// `seq` is the durable length) or through /text after the object lost the stream (the terminal
// row is the truth, even when the reader was shown more live). Then the fixture recorder runs
// into a temp dir and every fresh recording replays through client.js like the committed ones.
import test from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { EventSource } from 'eventsource';
import { assembleDurableText, followStream } from '../../public/client.js';
import { skipUnlessBuilt, startStack } from './harness.mjs';
import { api, durableFromDb, newStream, ok } from './util.mjs';
import { recordFixtures, RECORDER_VARS, STALE_VARS } from '../client/record-fixtures.mjs';
import { assertFollowed, loadFixtures, replay, streamCases } from '../client/replay.mjs';

const skip = skipUnlessBuilt();
let stack;

test.before(async () => {
  if (!skip) stack = await startStack({ name: 'e2e-client', vars: RECORDER_VARS });
});
test.after(async () => {
  await stack?.stop();
});

/**
 * Follows stream `id` with client.js; `texts` collects every onText. `untilText(n)` resolves
 * once the reader holds at least n UTF-16 units.
 */
function follow(id, options = {}) {
  const texts = [];
  const waiters = [];
  const handle = followStream({
    streamId: id,
    token: stack.token(id, 'read'),
    baseUrl: stack.baseUrl,
    EventSourceImpl: EventSource,
    onText: (text) => {
      texts.push(text);
      for (const w of waiters.splice(0)) w();
    },
    ...options,
  });
  const untilText = (n) =>
    new Promise((resolve) => {
      const check = () => (handle.text.length >= n ? resolve() : waiters.push(check));
      check();
    });
  return { handle, texts, untilText };
}

/** D1 refuses to change this row's status (a seal, or the lease's repair) until `drop()`. */
function refuseSeal(id) {
  const name = `e2e_refuse_seal_${id}`;
  stack.db.exec(`CREATE TRIGGER "${name}" BEFORE UPDATE ON messages WHEN NEW.id = '${id}' AND NEW.status <> 'streaming' BEGIN SELECT RAISE(ABORT, 'e2e: seal refused'); END;`);
  return { drop: () => stack.db.exec(`DROP TRIGGER IF EXISTS "${name}"`) };
}

test('live end short of what was shown: the reader ends holding exactly the durable text, end.seq long', { skip, timeout: 60_000 }, async () => {
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

test('/text recovery from a terminal row: after a kill the reader ends with the interrupted row, not its longer live text', { skip, timeout: 90_000 }, async () => {
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

test('the fixture recorder runs against the real runtime, and client.js follows every fresh recording', { skip, timeout: 180_000 }, async (t) => {
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
