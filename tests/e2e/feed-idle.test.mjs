// What an idle chat costs, and what is never lost between the objects (SPEC §11), against the real
// runtime (the dev build: its /dev/feed-stats count what the chat's object did, across its
// instances):
//
// - tabs connected and no turn running: the chat's object sleeps (nothing holds it awake; the
//   runtime evicts it, and the next event finds a new instance), and the events still reach every
//   tab, ids and all;
// - a feed connection ends at its token's `exp` (the relay closes it);
// - past FEED_MAX_READERS a tab is 429, as a stream's reader past MAX_READERS;
// - an idle feed whose object is reset during its idle period forgets on time, and after it nothing
//   wakes the object: no alarm, no read of the table;
// - a stream object reset while its notice is not sent, not stored, or stored but not confirmed:
//   every tab gets the turn's user message, its start and its end, once, in that order.
//
// Runs on D1 (Postgres changes nothing here: the rows are read only by the feed's checks).
import test from 'node:test';
import assert from 'node:assert/strict';
import { mintToken, startStack } from './harness.mjs';
import { api, call, followFeed, ndjson, ok, sleep, uniqueId, until } from './util.mjs';

const FEED_IDLE_MS = 8000;
const LEASE_MS = 2000;

let stack;
test.before(async () => {
  stack = await startStack({ name: 'e2e-feed-idle', vars: { DEV_MODE: '1', LEASE_MS: String(LEASE_MS), FEED_IDLE_MS: String(FEED_IDLE_MS), FEED_MAX_READERS: '3' } });
});
test.after(async () => {
  await stack?.stop();
});

const chatToken = (chat, { exp } = {}) => mintToken({ sub: 'u', scope: 'read', exp, claims: { chat } }, stack.secret);
const feedUrl = (chat, token = chatToken(chat)) => `${stack.baseUrl}/streams/chats/${encodeURIComponent(chat)}/events?token=${encodeURIComponent(token)}`;
const stats = async (chat) => (await call(`${stack.baseUrl}/dev/feed-stats?chat=${encodeURIComponent(chat)}`)).json;

/** A tab on the feed: resolves once its replay's `ready` came (`util.followFeed`). */
const tab = (chat, { token, lastEventId } = {}) => followFeed(feedUrl(chat, token), { lastEventId });

function answer(chat) {
  const id = uniqueId('a');
  stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES (?, ?, 'assistant')`, id, chat);
  return api(stack, id);
}

const userMessage = (id) => ({ id, role: 'user', parts: [{ type: 'text', text: 'Weather? 👍🏽' }] });
const LINES = ndjson([{ type: 'start' }, { type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: 'Sunny' }, { type: 'text-end', id: 't' }, { type: 'finish' }]);
const openIn = (c, chat, message) =>
  call(c.url('open'), {
    method: 'POST',
    headers: { authorization: `Bearer ${c.token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ format: 'ui', chat: { id: chat, userMessage: message } }),
  });

/** One whole turn: open naming the chat, the lines, close. */
async function turn(chat, user) {
  const c = answer(chat);
  ok(await openIn(c, chat, userMessage(user)), 'open');
  ok(await c.append(LINES), 'append');
  ok(await c.close(), 'close');
  return c;
}

const kinds = (events) => events.map((e) => `${e.type} ${e.streamId}`);

test('tabs connected, no turn running: the chat\'s object sleeps, and the next turn still reaches every tab', { timeout: 90_000 }, async () => {
  const chat = uniqueId('chat');
  const tabs = [await tab(chat), await tab(chat)];
  const first = await turn(chat, 'u-1');
  for (const t of tabs) await t.next('end');
  const before = await stats(chat);
  assert.equal(before.sockets, 2, 'the runtime holds both tabs\' sockets');
  // Idle with two tabs connected: the runtime evicts the object (about 10 s idle locally); the
  // next request reaches a new instance. Polled every 12 s: a poll is a request to the object.
  await until(async () => (await stats(chat)).counts.constructions > before.counts.constructions || undefined, 'a new instance of the idle object', 60_000, 12_000);
  const asleep = await stats(chat);
  assert.ok(asleep.meter.awakeMs - before.meter.awakeMs < 1000, `awake ${asleep.meter.awakeMs - before.meter.awakeMs} ms while its tabs waited`);
  assert.equal(asleep.sockets, 2, 'its tabs are still connected');
  const second = await turn(chat, 'u-2');
  for (const t of tabs) {
    await t.next('end');
    assert.deepEqual(kinds(t.events), [`user ${first.id}`, `start ${first.id}`, `end ${first.id}`, `user ${second.id}`, `start ${second.id}`, `end ${second.id}`]);
    t.close();
  }
});

test('a feed connection ends at its token\'s exp; past FEED_MAX_READERS a tab is 429', { timeout: 60_000 }, async () => {
  const chat = uniqueId('chat');
  const exp = Math.floor(Date.now() / 1000) + 3;
  const t = await tab(chat, { token: chatToken(chat, { exp }) });
  await t.sse.done.catch(() => {});
  const endedAt = Date.now();
  // Its socket goes with it (the object answers the close).
  await until(async () => (await stats(chat)).sockets === 0 || undefined, 'the expired tab\'s socket to close', 10_000);
  assert.ok(endedAt >= exp * 1000 - 50 && endedAt < exp * 1000 + 3000, `ended ${endedAt - exp * 1000} ms after the token's exp`);
  const open = [await tab(chat), await tab(chat), await tab(chat)];
  const refused = await call(feedUrl(chat));
  assert.equal(refused.status, 429, refused.raw);
  assert.equal(refused.json.error, 'too_many_readers');
  open.forEach((o) => o.close());
});

test('an idle feed reset during its idle period forgets on time; after it nothing wakes its object', { timeout: 120_000 }, async () => {
  const chat = uniqueId('chat');
  const reader = await tab(chat);
  const c = await turn(chat, 'u-f');
  const end = await reader.next('end');
  const lastEventAt = Date.now();
  reader.close();
  // Reset twice during the idle period (each wakes the object at its next request or alarm).
  for (let i = 0; i < 2; i++) {
    await stack.kill();
    await stack.restart();
  }
  assert.ok(Date.now() - lastEventAt < FEED_IDLE_MS, 'both resets within the idle period');
  // Forgotten at the deadline, not a deadline later: the alarm of the fresh instance.
  const forgot = await until(async () => {
    const s = await stats(chat);
    return s.counts.forgets > 0 && s;
  }, 'the feed to forget', FEED_IDLE_MS + 15_000);
  const late = Date.now() - (lastEventAt + FEED_IDLE_MS);
  assert.ok(late < 5_000, `forgot ${late} ms after its deadline`);
  assert.equal(forgot.counts.rowReads, 0, 'forgetting read nothing from the table');
  // Then nothing for two idle periods (no alarm, no load, no read): a window to watch, not a
  // synchronization.
  await sleep(2 * FEED_IDLE_MS);
  const after = await stats(chat);
  const wakes = { alarms: after.meter.alarms - forgot.meter.alarms, loads: after.counts.loads - forgot.counts.loads, rowReads: after.counts.rowReads };
  assert.deepEqual(wakes, { alarms: 0, loads: 0, rowReads: 0 }, 'wakes after forgetting');
  // The history is gone: an old position is told to reload, a new reader gets an empty feed.
  const back = await tab(chat, { lastEventId: end.id });
  assert.equal(back.sse.frames.find((f) => f.json)?.json.type, 'reload');
  assert.deepEqual(back.events.filter((e) => e.type !== 'reload'), [], `nothing kept of ${c.id}`);
  back.close();
});

// Each kind of failure of the start's notice, then a reset of the stream's object before it could
// send it again; the producer resumes after the restart and finishes.
for (const [kind, what] of [
  ['before', 'never sent'],
  ['lost', 'stored by the feed, its answer lost'],
  ['hold', 'stored by the feed, never answered'],
]) {
  test(`a stream object reset while its start's notice was ${what}: every tab gets user, start, end once, in order`, { timeout: 90_000 }, async () => {
    await stack.restart({ vars: { TEST_FAULTS: `rate=1;kinds=${kind};ops=notice` } });
    const chat = uniqueId('chat');
    const reader = await tab(chat);
    const c = answer(chat);
    const opened = ok(await openIn(c, chat, userMessage(`u-${kind}`)), 'open');
    ok(await c.append(LINES.slice(0, 30)), 'append');
    ok(await c.flush(), 'flush');
    const lastId = reader.events.at(-1)?.id;
    await stack.kill();
    await stack.restart({ vars: { TEST_FAULTS: '' } });
    const resumed = ok(await call(c.url('resume'), { method: 'POST', headers: { authorization: `Bearer ${c.token}`, 'x-rindle-epoch': String(opened.epoch) } }), 'resume');
    const again = await tab(chat, { lastEventId: lastId });
    const epoch = { 'x-rindle-epoch': String(resumed.epoch), authorization: `Bearer ${c.token}` };
    assert.equal((await fetch(c.url('append'), { method: 'POST', headers: epoch, body: LINES.slice(resumed.seq) })).status, 200);
    assert.equal((await fetch(c.url('close'), { method: 'POST', headers: epoch })).status, 200);
    await again.next('end');
    const all = [...reader.events, ...again.events];
    assert.deepEqual(kinds(all), [`user ${c.id}`, `start ${c.id}`, `end ${c.id}`], `each event once, in order (${kind})`);
    assert.equal(all[0].message.id, `u-${kind}`, 'the user\'s message');
    // And a new tab's replay says the same.
    const fresh = await tab(chat);
    assert.deepEqual(kinds(fresh.events), kinds(all));
    fresh.close();
    again.close();
  });
}
