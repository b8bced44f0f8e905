// public/chat-feed.js's decisions and its session, without a browser: `planTurn` and
// `turnsToApply` (pure), and `syncChat` driven by a scripted EventSource and a chat object with the
// AI SDK Chat's surface (messages, status, resumeStream, the status callback). The EventSource and
// the chat are stand-ins: what a real browser, the real `Chat` and the real feed do together is
// tests/browser/chat-feed.test.mjs. Here: one subscription however often StrictMode remounts,
// turns applied in order once the chat is idle, nothing attached twice, a reload replacing the
// messages with the app's.
import test from 'node:test';
import assert from 'node:assert/strict';
import { planTurn, syncChat, turnsToApply } from '../../public/chat-feed.js';
import { until } from '../e2e/util.mjs';

const user = (id, text = 'q') => ({ id, role: 'user', parts: [{ type: 'text', text }] });
const answer = (id, state = 'done') => ({ id, role: 'assistant', parts: [{ type: 'text', text: 'a', state }] });
const turn = (streamId, { user: u, end } = {}) => ({ streamId, user: u, start: { streamId, messageId: streamId, format: 'ui' }, end });

test('planTurn: a turn started elsewhere adds its question, then attaches its answer', () => {
  assert.deepEqual(planTurn([user('u1'), answer('a1')], turn('a2', { user: user('u2') })), { messages: [user('u1'), answer('a1'), user('u2')], attach: true });
  assert.deepEqual(planTurn([], turn('a2')), { attach: true }, 'no user message: the answer alone');
  assert.deepEqual(planTurn([], { streamId: 'a2', user: user('u2') }), { attach: false }, 'no start yet: wait for it');
});

test('planTurn: what the chat shows already is left alone (the sender\'s own turn, a second event of a turn)', () => {
  assert.deepEqual(planTurn([user('u1'), answer('a1')], turn('a1', { user: user('u1') })), { attach: false });
  assert.deepEqual(planTurn([user('u1'), answer('a1')], turn('a1', { user: user('u1'), end: { status: 'complete' } })), { attach: false });
  assert.deepEqual(planTurn([user('u1')], turn('a1', { user: user('u1') }), 'done'), { attach: false }, 'attached, then removed by the app: left');
});

test('planTurn: a regeneration or an edit of a question shown replaces what followed it', () => {
  const shown = [user('u1'), answer('a1'), user('u2', 'old'), answer('a2')];
  assert.deepEqual(planTurn(shown, turn('a3', { user: user('u2', 'old') })), { messages: [user('u1'), answer('a1'), user('u2', 'old')], attach: true });
  assert.deepEqual(planTurn(shown, turn('a3', { user: user('u1', 'edited') })), { messages: [user('u1', 'edited')], attach: true });
});

test('planTurn: a user message told late goes just before its answer; an answer in flight this tab lost is attached again', () => {
  assert.deepEqual(planTurn([answer('a1')], turn('a1', { user: user('u1') })), { messages: [user('u1'), answer('a1')], attach: false });
  assert.deepEqual(planTurn([answer('a1', 'streaming')], turn('a1'), 'failed'), { attach: true });
  assert.deepEqual(planTurn([answer('a1', 'streaming')], turn('a1', { end: { status: 'complete' } }), 'failed'), { attach: false }, 'ended: the app has it');
});

test('turnsToApply: a new reader applies its replay from the last turn the chat shows anything of', () => {
  const turns = [turn('a1', { user: user('u1') }), turn('old'), turn('a2', { user: user('u2') }), turn('a3', { user: user('u3') })];
  assert.deepEqual(turnsToApply([user('u1'), answer('a1'), user('u2')], turns).map((t) => t.streamId), ['a2', 'a3']);
  assert.deepEqual(turnsToApply([user('u1'), answer('a2')], turns.slice(0, 3)).map((t) => t.streamId), ['a2'], 'a replaced turn before it is not brought back');
  assert.deepEqual(turnsToApply([], turns).map((t) => t.streamId), ['a1', 'old', 'a2', 'a3'], 'nothing shown: all');
});

// ---- the session

/** An EventSource the test speaks for. */
class ScriptedSource {
  static all = [];
  constructor(url) {
    this.url = url;
    this.readyState = 1;
    ScriptedSource.all.push(this);
  }
  send(event, id = '') {
    this.onmessage?.({ data: JSON.stringify(event), lastEventId: id });
  }
  close() {
    this.readyState = 2;
  }
}

/** The surface of the AI SDK's `Chat` syncChat uses; `resumeStream` streams what `attach` named. */
function fakeChat(messages = []) {
  const callbacks = new Set();
  const chat = {
    id: 'c1',
    messages,
    status: 'ready',
    resumes: [],
    setStatus(status) {
      this.status = status;
      for (const cb of callbacks) cb();
    },
    ['~registerStatusCallback'](cb) {
      callbacks.add(cb);
      return () => callbacks.delete(cb);
    },
    async resumeStream() {
      const streamId = transport.next;
      this.resumes.push(streamId);
      this.setStatus('streaming');
      await new Promise((r) => setTimeout(r, 5));
      this.messages = [...this.messages, answer(streamId)];
      this.setStatus('ready');
    },
  };
  const transport = { next: undefined, attach: (id) => (transport.next = id) };
  return { chat, transport };
}

const tick = () => new Promise((r) => setTimeout(r, 0));
/** Resolves once `chat` made `n` resumes and is idle again. */
const resumed = (chat, n) => until(() => chat.resumes.length === n && chat.status === 'ready', `${n} resumes, then ready`);

test('syncChat: StrictMode\'s mount, unmount and mount make one subscription; a real unmount closes it', async () => {
  ScriptedSource.all = [];
  const { chat, transport } = fakeChat();
  const options = { transport, token: 't', EventSource: ScriptedSource };
  const first = syncChat(chat, options);
  first();
  const second = syncChat(chat, options);
  await tick();
  await tick();
  assert.equal(ScriptedSource.all.length, 1, 'one EventSource');
  assert.equal(ScriptedSource.all[0].url, '/streams/chats/c1/events?token=t');
  second();
  await tick();
  assert.equal(ScriptedSource.all[0].readyState, 2, 'closed');
});

test('syncChat: turns apply in order once the chat is idle; its own answer and the active one are not attached twice', async () => {
  ScriptedSource.all = [];
  const { chat, transport } = fakeChat([user('u0')]);
  const stop = syncChat(chat, { transport, token: 't', EventSource: ScriptedSource, active: 'a0' });
  await tick();
  const es = ScriptedSource.all[0];
  // The replay: the active answer (attached already), then ready.
  es.send({ type: 'user', streamId: 'a0', message: user('u0') }, 'g-1');
  es.send({ type: 'start', streamId: 'a0', messageId: 'a0', format: 'ui' }, 'g-2');
  es.send({ type: 'ready' }, 'g-2');
  await resumed(chat, 1);
  await tick();
  assert.deepEqual(chat.resumes, ['a0'], 'the active answer once');
  // This tab sends: busy while its own turn is told; nothing applied until it is idle.
  chat.setStatus('submitted');
  chat.messages = [...chat.messages, user('u1')];
  es.send({ type: 'user', streamId: 'a1', message: user('u1') }, 'g-3');
  es.send({ type: 'start', streamId: 'a1', messageId: 'a1', format: 'ui' }, 'g-4');
  await tick();
  assert.deepEqual(chat.resumes, ['a0'], 'waits while the chat is busy');
  chat.messages = [...chat.messages, answer('a1')];
  chat.setStatus('ready');
  // Another tab's turn.
  es.send({ type: 'end', streamId: 'a1', status: 'complete', durableSeq: 9 }, 'g-5');
  es.send({ type: 'user', streamId: 'a2', message: user('u2') }, 'g-6');
  es.send({ type: 'start', streamId: 'a2', messageId: 'a2', format: 'ui' }, 'g-7');
  await resumed(chat, 2);
  assert.deepEqual(chat.resumes, ['a0', 'a2'], 'its own answer never attached; the other tab\'s once');
  assert.deepEqual(chat.messages.map((m) => m.id), ['u0', 'a0', 'u1', 'a1', 'u2', 'a2']);
  stop();
});

test('syncChat: a reload replaces the messages with the app\'s, then applies the history', async () => {
  ScriptedSource.all = [];
  const { chat, transport } = fakeChat([user('u0')]);
  const stop = syncChat(chat, { transport, token: 't', EventSource: ScriptedSource, reload: async () => [user('u0'), answer('a0'), user('u1')] });
  await tick();
  const es = ScriptedSource.all[0];
  es.send({ type: 'reload' });
  es.send({ type: 'user', streamId: 'a1', message: user('u1') }, 'g-1');
  es.send({ type: 'start', streamId: 'a1', messageId: 'a1' }, 'g-2');
  es.send({ type: 'ready' }, 'g-2');
  await resumed(chat, 1);
  assert.deepEqual(chat.messages.map((m) => m.id), ['u0', 'a0', 'u1', 'a1']);
  assert.deepEqual(chat.resumes, ['a1']);
  stop();
});

test('syncChat: every reconnect is the session\'s, with the token asked again and the position it has now', async () => {
  ScriptedSource.all = [];
  const { chat, transport } = fakeChat();
  let minted = 0;
  const stop = syncChat(chat, { transport, token: async () => `t${++minted}`, EventSource: ScriptedSource });
  await until(() => ScriptedSource.all.length === 1, 'the first connection');
  const first = ScriptedSource.all[0];
  assert.equal(first.url, '/streams/chats/c1/events?token=t1', 'a new reader: no position');
  first.send({ type: 'ready' }, ''); // an empty generation: no position to keep
  first.readyState = 0; // the server ended it (its token's exp); the EventSource would reconnect with t1
  first.onerror();
  assert.equal(first.readyState, 2, 'closed: its own reconnect would carry the expired token');
  await until(() => ScriptedSource.all.length === 2, 'reconnected');
  assert.equal(ScriptedSource.all[1].url, '/streams/chats/c1/events?token=t2', 'a fresh token, and no stale after=');
  const second = ScriptedSource.all[1];
  second.send({ type: 'user', streamId: 'a1', message: user('u1') }, 'g-1');
  second.send({ type: 'ready' }, 'g-1');
  second.onerror();
  await until(() => ScriptedSource.all.length === 3, 'reconnected again');
  assert.equal(ScriptedSource.all[2].url, '/streams/chats/c1/events?token=t3&after=g-1', 'from where it is');
  stop();
});

test('syncChat: a hidden page keeps its feed but attaches nothing until it is shown, then applies what came in order', async () => {
  ScriptedSource.all = [];
  const listeners = new Set();
  const doc = { visibilityState: 'hidden', addEventListener: (_, f) => listeners.add(f), removeEventListener: (_, f) => listeners.delete(f) };
  globalThis.document = doc;
  try {
    const { chat, transport } = fakeChat();
    const stop = syncChat(chat, { transport, token: 't', EventSource: ScriptedSource });
    await until(() => ScriptedSource.all.length === 1, 'the feed, while hidden');
    const es = ScriptedSource.all[0];
    es.send({ type: 'ready' }, '');
    for (const n of [1, 2]) {
      es.send({ type: 'user', streamId: `a${n}`, message: user(`u${n}`) }, `g-${2 * n - 1}`);
      es.send({ type: 'start', streamId: `a${n}`, messageId: `a${n}`, format: 'ui' }, `g-${2 * n}`);
    }
    for (let i = 0; i < 5; i++) await tick();
    assert.deepEqual(chat.resumes, [], 'hidden: no answer attached');
    doc.visibilityState = 'visible';
    for (const f of [...listeners]) f();
    await resumed(chat, 2);
    assert.deepEqual(chat.messages.map((m) => m.id), ['u1', 'a1', 'u2', 'a2'], 'shown: in the feed\'s order');
    stop();
  } finally {
    delete globalThis.document;
  }
});
