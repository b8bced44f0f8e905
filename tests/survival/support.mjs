// Shared by tests/survival/*: the producer in its own process, the readers, the answers, and the
// assertions every survival test makes of a finished answer.
import assert from 'node:assert/strict';
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { EventSource } from 'eventsource';
import { readUIMessageStream } from 'ai';
import { emojiText, rows, splitCodePoints, uiMessageOf, withTimeout } from '../e2e/util.mjs';
import { encodeUIChunk } from '../../public/producer.js';
import { readUIStream } from '../../public/chat-transport.js';

const CHILD = fileURLToPath(new URL('./producer-child.mjs', import.meta.url));
/** A bound for a step that hangs, far above a restart on a busy machine (5-10 s). */
export const STEP_MS = 45_000;

/** The producer process: `messages` so far, `next(predicate)` for the next one that matches. */
export function startProducer() {
  const child = fork(CHILD, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const messages = [];
  const waiters = [];
  child.on('message', (m) => {
    messages.push(m);
    for (const w of [...waiters]) if (w.match(m)) {
      waiters.splice(waiters.indexOf(w), 1);
      w.resolve(m);
    }
  });
  return {
    child,
    messages,
    send: (m) => child.send(m),
    /** The first message from now on (or already seen after index `since`) that matches. */
    next(match, what, since = messages.length) {
      const seen = messages.slice(since).find(match);
      if (seen) return Promise.resolve(seen);
      return withTimeout(new Promise((resolve) => waiters.push({ match, resolve })), STEP_MS, `producer: no ${what}; messages: ${JSON.stringify(messages.slice(-8))}`);
    },
    stop: () => child.kill('SIGKILL'),
  };
}

/** An EventSource on /events, rebuilding the text by offset and recording every durable seq. */
export function eventsReader(baseUrl, id, token) {
  const state = { text: '', durables: [], problems: [], opens: 0, end: undefined };
  const es = new EventSource(`${baseUrl}/streams/${id}/events?from=0&token=${encodeURIComponent(token)}`);
  state.done = new Promise((resolve) => {
    es.addEventListener('message', (ev) => {
      const f = JSON.parse(ev.data);
      if (f.type === 'open') state.opens += 1;
      else if (f.type === 'chunk') {
        if (f.from > state.text.length) state.problems.push(`chunk from ${f.from} past the ${state.text.length} held (a gap)`);
        state.text = state.text.slice(0, f.from) + f.text;
      } else if (f.type === 'durable') state.durables.push(f.seq);
      else if (f.type === 'end') {
        state.end = f;
        es.close();
        resolve(state);
      } else {
        state.problems.push(`unexpected ${ev.data}`);
        es.close();
        resolve(state);
      }
    });
  });
  state.close = () => es.close();
  return state;
}

/** Pieces of one answer: text deltas for `text`, UI message chunks for `ui`. */
export function answerOf(r, id, format) {
  const deltas = splitCodePoints(emojiText(r, 900) + ' 你好，世界 👩🏽‍💻 👨‍👩‍👧‍👦 👍🏿', r, 4, 30);
  if (format === 'text') return { pieces: deltas, encode: (p) => p };
  const pieces = [
    { type: 'start', messageId: id },
    { type: 'start-step' },
    { type: 'reasoning-start', id: 'r1' },
    ...deltas.slice(0, 6).map((delta) => ({ type: 'reasoning-delta', id: 'r1', delta })),
    { type: 'reasoning-end', id: 'r1' },
    { type: 'text-start', id: 't1' },
    ...deltas.slice(6).map((delta) => ({ type: 'text-delta', id: 't1', delta })),
    { type: 'text-end', id: 't1' },
    { type: 'finish-step' },
    { type: 'finish', finishReason: 'stop' },
  ];
  return { pieces, encode: encodeUIChunk };
}


/** `/ui` through chat-transport's readUIStream (reconnecting): `chunks`, `done`. */
export function uiReader(baseUrl, id, token) {
  const chunks = [];
  const done = (async () => {
    for await (const chunk of readUIStream({ streamId: id, token, streamsUrl: baseUrl, retry: { giveUpAfterMs: 120_000 } })) chunks.push(chunk);
  })();
  return { chunks, done };
}

/**
 * What a surviving answer must be: pipe resolved `complete` having read the source once; the
 * row `complete` with exactly the produced text and no chunk rows; every reader's text that
 * text; durableSeq never falling in any list of `durables`; (ui) the message `ai` builds from
 * the /ui chunks deep-equal to the source's.
 */
export async function assertSurvived({ stack, id, producer, pieces, produced, readers, ui, durables = [] }) {
  const ended = await producer.next((m) => m.type === 'ended' || m.type === 'failed', 'end of pipe');
  assert.equal(ended.type, 'ended', `pipe rejected: ${ended.error}`);
  assert.equal(ended.ended.status, 'complete', 'pipe resolves complete');
  assert.equal(ended.reads, pieces.length, 'the source was read once, piece by piece');
  const { row, chunks } = rows(stack, id);
  assert.equal(row.status, 'complete');
  assert.equal(row.body, produced, 'the row holds exactly the produced text');
  assert.equal(chunks.length, 0, 'no chunk rows left');
  for (const [k, reader] of readers.entries()) {
    await withTimeout(reader.done, STEP_MS, `reader ${k} did not end`);
    assert.deepEqual(reader.problems, [], `reader ${k}`);
    assert.equal(reader.text, produced, `reader ${k} has exactly the produced text`);
    assert.equal(reader.end.status, 'complete');
  }
  for (const list of [...durables, ...readers.map((x) => x.durables)]) {
    assert.deepEqual(list, [...list].sort((a, b) => a - b), `durableSeq never falls: ${list}`);
  }
  if (ui) {
    await withTimeout(ui.done, STEP_MS, 'the /ui reader did not end');
    const expected = (await uiMessageOf(pieces)).message;
    let message;
    for await (const snapshot of readUIMessageStream({ stream: ReadableStream.from(ui.chunks.map((c) => structuredClone(c))) })) message = snapshot;
    assert.deepEqual(message, expected, "the /ui message is the source's: no part duplicated, none lost");
    assert.deepEqual(message.parts.filter((p) => p.type === 'text' || p.type === 'reasoning').map((p) => p.type), ['reasoning', 'text'], 'one reasoning part, one text part');
  }
  return producer.messages.filter((m) => m.type === 'resumed');
}
