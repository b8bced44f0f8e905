// Records the client fixtures (tests/client/fixtures/*.json) from the real Worker: every frame
// is what the server sent over SSE, every /text answer what it answered, every D1 row what it
// wrote. The recorder plays the reader's part by hand (which offset to join at, when its
// connection drops, when it reads /text), the part client.js must then replay on its own, and
// takes each fixture's `expect` from the server's truth (D1 and /text), never from client.js.
//
//   scripts/build.sh --dev && node tests/client/record-fixtures.mjs [outDir]   (default: the fixtures dir)
//
// Two things are not recorded: tokens (they expire; fixtures say "read-token") and, in gap.json,
// one chunk frame, removed on purpose as a proxy losing it would. tests/e2e/client.test.mjs runs
// the recorder into a temp dir on every test run, so it cannot rot.
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startStack } from '../e2e/harness.mjs';
import { api, durableFromDb, insertRow, ok, until } from '../e2e/util.mjs';

export const FIXTURES_DIR = fileURLToPath(new URL('./fixtures/', import.meta.url));

/**
 * The recording stack. Checkpoints only on flush and close (CHECKPOINT_CHARS and the interval
 * out of reach), so what is durable is chosen by the script; a short linger, lease and idle
 * timeout so the `absent`, lease and idle endings come within seconds.
 */
export const RECORDER_VARS = {
  CHECKPOINT_CHARS: '100000', CHECKPOINT_INTERVAL_MS: '60000', LINGER_MS: '3000', LEASE_MS: '1500', IDLE_TIMEOUT_MS: '3000',
  // No resume window: a reset stream is rebuilt and sealed `interrupted` at once, the ending the
  // fixtures record.
  RESUME_WINDOW_MS: '0',
};
/** A second stack where readers overflow at once: 4 queued frames, one write per N × 10 ms. */
export const STALE_VARS = { ...RECORDER_VARS, MAX_QUEUED_FRAMES: '4', READER_PACING_US: '10000', READER_PACING_BURST: '1' };

/** The produced text, and its pieces: cut inside grapheme clusters, never inside a surrogate pair. */
const PIECES = ['Hi 👩', '\u200d💻 team! 🇯', '🇵 cafe', '\u0301 👍', '🏽 流式', '传输 𠮷', ' done.\n'];
const TEXT = PIECES.join('');
const TOKEN = 'read-token';
const WAIT_MS = 20_000;

const frames = (sse) => sse.frames.filter((f) => f.data !== undefined).map((f) => f.json);
const isType = (type) => (f) => f.json?.type === type;
const chunkTo = (seq) => (f) => f.json?.type === 'chunk' && f.json.seq === seq;
const durableAt = (seq) => (f) => f.json?.type === 'durable' && f.json.seq >= seq;
const upTo = (n) => PIECES.slice(0, n).join('');

/** A stream of the recording: its id, API client and helpers. */
function stream(stack, name) {
  const id = insertRow(stack, `msg_${name}`);
  const s = api(stack, id);
  return {
    ...s,
    /** Append piece `i` and wait until `reader` has it as a chunk frame ending there. */
    async push(i, reader) {
      ok(await s.append(PIECES[i]), `append ${i}`);
      if (reader) await reader.next(chunkTo(upTo(i + 1).length), WAIT_MS);
    },
    /** Flush and, with a reader, wait for its durable frame. */
    async flush(reader) {
      const { durableSeq } = ok(await s.flush(), 'flush');
      if (reader) await reader.next(durableAt(durableSeq), WAIT_MS);
      return durableSeq;
    },
    /** A subscription whose first frame has arrived (so it is attached). */
    async join(from, headers) {
      const sse = await s.events(from, { headers });
      assert.equal(sse.status, 200, `events of ${id}`);
      return sse;
    },
    /** Read to the end (end, absent or stale) and close. */
    async toEnd(sse) {
      const last = (f) => ['end', 'absent', 'stale'].includes(f.json?.type);
      if (!sse.frames.some(last)) await sse.next(last, WAIT_MS);
      sse.close();
      return frames(sse);
    },
    /** Push pieces `first`.. to `reader`, close, and read it to its end: { tail, text }. */
    async finish(first, reader) {
      for (let i = first; i < PIECES.length; i++) await this.push(i, reader);
      ok(await s.close(), 'close');
      return { tail: await this.toEnd(reader), text: durableFromDb(stack.db, id).text };
    },
    /** GET /text as recorded: { status, body }. */
    async text() {
      const res = await s.text();
      assert.equal(res.status, 200, `/text of ${id}: ${res.raw}`);
      return { status: res.status, body: res.json };
    },
    /** The durable text straight from D1 (util.mjs's oracle, independent of both assemblers). */
    durable: () => durableFromDb(stack.db, id),
  };
}

const fixture = (f) => ({ streamId: f.streamId, token: TOKEN, ...f });
/** What a reader of a stream that completed with the whole TEXT must end with. */
const completed = (text, connections, textFetches) => ({ text, produced: TEXT, status: 'complete', durableSeq: text.length, connections, textFetches });

// ---------------------------------------------------------------------------------------
// The scenarios. Each returns one fixture (or, for end-statuses, one case).

/** A live join from 0: chunks cut inside clusters, durable frames trailing after flushes. */
async function spliceEmoji(stack, out) {
  const s = stream(stack, 'splice');
  ok(await s.open(), 'open');
  const r = await s.join(0);
  for (let i = 0; i < PIECES.length; i++) {
    await s.push(i, r);
    if (i === 1 || i === 4) await s.flush(r);
  }
  // D1 as it stands mid-stream (everything flushed, nothing pending): the assemblers' input.
  const { row, chunks } = s.durable();
  const text = await s.text();
  out.durableRows.push({ what: 'a live stream after flushes: chunk rows, no body yet', body: row.body, chunks: chunks.map(({ seq, text: t }) => ({ seq, text: t })), text: text.body.text, status: text.body.status });
  ok(await s.close(), 'close');
  const conn = await s.toEnd(r);
  const sealed = s.durable();
  out.durableRows.push({ what: 'the same stream sealed: the compacted body, no chunk rows', body: sealed.row.body, chunks: sealed.chunks.map(({ seq, text: t }) => ({ seq, text: t })), text: (await s.text()).body.text, status: 'complete' });
  assert.equal(sealed.text, TEXT);
  return {
    stream: s,
    fixture: fixture({
      streamId: s.id,
      description: 'A fresh join from 0 while the response is produced. Chunks cut inside grapheme clusters (between 👩 and its ZWJ, between the two regional indicators of 🇯🇵, before a combining U+0301, before a skin-tone modifier) but never inside a surrogate pair. Durable frames follow the flushes.',
      connections: [{ from: 0, events: conn }],
      expect: completed(sealed.text, 1, 0),
    }),
  };
}

/** A reader joining within the linger window: one replay of open (ended), text, durable, end. */
async function lateJoin(s) {
  const conn = await s.toEnd(await s.join(0));
  const { text } = s.durable();
  return fixture({
    streamId: s.id,
    description: 'A reader joins within the linger window after the seal: one synchronous replay of open (ended: true), the whole text, durable and end.',
    connections: [{ from: 0, events: conn }],
    expect: completed(text, 1, 0),
  });
}

/** Frames the recorder reads, then drops: `{transport}` marks where the connection died. */
async function reconnectOverlap(stack) {
  const s = stream(stack, 'overlap');
  ok(await s.open(), 'open');
  for (let i = 0; i < 3; i++) ok(await s.append(PIECES[i]), 'append');
  await s.flush();
  const initialText = upTo(3);
  const r1 = await s.join(5); // an older durable offset: the replay covers text the reader has
  await r1.next(isType('durable'), WAIT_MS);
  await s.push(3, r1);
  const lastId = r1.frames.filter((f) => f.id !== undefined).at(-1).id;
  r1.close();
  await s.push(4); // while the reader is away
  // The browser's own reconnect: the same URL, with Last-Event-ID.
  const { tail, text } = await s.finish(5, await s.join(5, { 'last-event-id': lastId }));
  return fixture({
    streamId: s.id,
    description: 'The reader already holds the first part of the text (initialText, e.g. from its own query of the message row) but joins from an older offset, so the replay chunk covers text it already has. Then the connection drops and the EventSource reconnects by itself: the server replays from Last-Event-ID on the same EventSource, and no new one may be created.',
    options: { initialText, from: 5 },
    connections: [{ from: 5, events: [...frames(r1), { transport: 'reconnect' }, ...tail] }],
    expect: completed(text, 1, 0),
  });
}

/** The browser gives up (CLOSED): client.js opens a new EventSource from the length it holds. */
async function closedRejoin(stack) {
  const s = stream(stack, 'closed');
  ok(await s.open(), 'open');
  const r1 = await s.join(0);
  await s.push(0, r1);
  await s.push(1, r1);
  r1.close();
  await s.push(2);
  const { tail, text } = await s.finish(3, await s.join(upTo(2).length));
  return fixture({
    streamId: s.id,
    description: 'The EventSource gave up (readyState CLOSED, e.g. a 502 from a proxy on its own reconnect). The client opens a new one itself from the length of the text it holds.',
    connections: [{ from: 0, events: [...frames(r1), { transport: 'closed' }] }, { from: upTo(2).length, events: tail }],
    expect: completed(text, 2, 0),
  });
}

/** A lost chunk (removed from the recording): the client reads /text and rejoins from there. */
async function gap(stack) {
  const s = stream(stack, 'gap');
  ok(await s.open(), 'open');
  const r1 = await s.join(0);
  for (let i = 0; i < 3; i++) await s.push(i, r1);
  r1.close();
  const recorded = frames(r1);
  const lost = recorded.findIndex((f) => f.type === 'chunk' && f.seq === upTo(2).length);
  assert.ok(lost > 0, 'the second chunk was recorded');
  const conn1 = recorded.filter((_, i) => i !== lost);
  await s.flush();
  const text1 = await s.text();
  const at = text1.body.seq;
  const { tail, text } = await s.finish(3, await s.join(at));
  return fixture({
    streamId: s.id,
    description: 'A chunk frame was lost (removed from this recording, as a proxy dropping it would): the next chunk starts beyond the text held. The gap is detected, the client reads /text and rejoins from there.',
    connections: [{ from: 0, events: conn1 }, { from: at, events: tail }],
    textResponses: [text1],
    expect: { ...completed(text, 2, 1), gapAt: { have: upTo(1).length, from: upTo(2).length } },
  });
}

/** A reader that overflows its queue gets `stale`; /text and a rejoin put it right. */
async function staleFallback(stack) {
  const TAIL = ' and after the rejoin.';
  for (let attempt = 1; ; attempt++) {
    const s = stream(stack, `stale${attempt}`);
    ok(await s.open(), 'open');
    const r1 = await s.join(0);
    const others = await Promise.all([1, 2, 3, 4].map(() => s.join(0))); // 5 readers: one write per 50 ms
    // A burst: the appends race, so their order is the server's (the text is read back below);
    // far more than 4 frames within one 50 ms pace.
    const burst = [...PIECES, ...PIECES];
    for (const res of await Promise.all(burst.map((p) => s.append(p)))) ok(res, 'append');
    const total = burst.join('').length;
    const last = await r1.next((f) => f.json?.type === 'stale' || (f.json?.type === 'chunk' && f.json.seq === total), WAIT_MS);
    r1.close();
    for (const o of others) o.close();
    if (last.json.type !== 'stale') {
      if (attempt >= 5) throw new Error('recorder: no reader went stale in 5 bursts');
      continue;
    }
    await s.flush();
    const text1 = await s.text();
    const r2 = await s.join(text1.body.seq);
    ok(await s.append(TAIL), 'append');
    await r2.next(chunkTo(total + TAIL.length), WAIT_MS);
    ok(await s.close(), 'close');
    const tail = await s.toEnd(r2);
    const { text } = s.durable();
    return fixture({
      streamId: s.id,
      description: 'A reader falls behind (this recording: 4 queued frames at most, 5 readers paced to one write per 50 ms each, a burst of concurrent appends): the server drops it with `stale`. The client closes the EventSource, reads the durable text from /text (longer than what it holds), splices it in and rejoins live from its length.',
      connections: [{ from: 0, events: frames(r1) }, { from: text1.body.seq, events: tail }],
      textResponses: [text1],
      expect: { text, produced: text, status: 'complete', durableSeq: text.length, connections: 2, textFetches: 1 },
    });
  }
}

/** One case per way a live reader sees a stream end. */
async function endStatuses(stack, out) {
  const cases = [];
  const endCase = async (name, drive, description) => {
    const s = stream(stack, `end_${name}`);
    ok(await s.open(), 'open');
    const r = await s.join(0);
    const produced = await drive(s, r);
    const conn = await s.toEnd(r);
    const end = conn.at(-1);
    assert.equal(end.type, 'end', `${name}: ends with end`);
    const durable = s.durable();
    s.dropTrigger?.();
    if (name === 'seal-short') {
      out.durableRows.push({ what: 'a seal D1 refused: the chunk rows up to the last flush, no body', body: durable.row.body, chunks: durable.chunks.map(({ seq, text: t }) => ({ seq, text: t })), text: durable.text, status: durable.row.status });
    }
    assert.equal(durable.text.length, end.seq, `${name}: end.seq is the durable length`);
    cases.push({
      status: name,
      streamId: s.id,
      description,
      connections: [{ from: 0, events: conn }],
      expect: { text: durable.text, produced, status: end.status, durableSeq: end.seq, error: end.error ?? null, connections: 1, textFetches: 0 },
    });
  };
  await endCase('complete', async (s, r) => {
    for (let i = 0; i < PIECES.length; i++) await s.push(i, r);
    ok(await s.close(), 'close');
    return TEXT;
  }, 'The producer closes: `complete`, the whole text.');
  await endCase('cancelled', async (s, r) => {
    for (let i = 0; i < 3; i++) await s.push(i, r);
    ok(await s.cancel(), 'cancel');
    assert.equal(ok(await s.append(PIECES[3]), 'append after cancel').cancelled, true);
    await r.next(chunkTo(upTo(4).length), WAIT_MS);
    assert.equal(ok(await s.close(), 'close').status, 'cancelled');
    return upTo(4);
  }, 'A reader cancels; the producer learns it on its next append and closes: `cancelled`.');
  await endCase('error', async (s, r) => {
    for (let i = 0; i < 4; i++) await s.push(i, r);
    ok(await s.fail('upstream: The server had an error while processing your request.'), 'fail');
    return upTo(4);
  }, 'The producer fails the stream: `error` with its message.');
  await endCase('interrupted', async (s, r) => {
    for (let i = 0; i < 5; i++) await s.push(i, r);
    return upTo(5); // then silence: the idle timeout (IDLE_TIMEOUT_MS) seals it
  }, 'The producer goes silent: after IDLE_TIMEOUT_MS the stream seals itself `interrupted`, with the whole text.');
  await endCase('seal-short', async (s, r) => {
    for (let i = 0; i < 3; i++) await s.push(i, r);
    await s.flush(r);
    for (let i = 3; i < 5; i++) await s.push(i, r);
    // D1 refuses the seal: the stream still ends, with end.seq the durable length, short of
    // what the reader was shown live. The trigger goes once the durable text is recorded.
    const trigger = `e2e_record_seal_${s.id}`;
    stack.db.exec(`CREATE TRIGGER "${trigger}" BEFORE UPDATE ON messages WHEN NEW.id = '${s.id}' AND NEW.status <> 'streaming' BEGIN SELECT RAISE(ABORT, 'recorder: seal refused'); END;`);
    const res = await s.close();
    assert.equal(res.status, 503, `close with the seal refused: ${res.raw}`);
    await r.next(isType('end'), WAIT_MS);
    s.dropTrigger = () => stack.db.exec(`DROP TRIGGER "${trigger}"`);
    return upTo(5);
  }, 'The seal could not commit (D1 refused it): the stream still ends, and `end.seq` is the durable length, short of the text shown live. A reader that ends holds exactly the durable text.');
  return { cases };
}

/**
 * The object loses its memory (kill -9 and restart) under a live reader that holds more than
 * is durable: its reconnect gets `absent`, /text the checkpointed prefix (row `streaming`), its
 * rejoin `absent` again, and the second /text the row the lease sealed `interrupted`. The reader
 * must end holding exactly that durable text, not the longer text it was shown live.
 */
async function evictedStreaming(stack) {
  const s = stream(stack, 'evicted');
  ok(await s.open(), 'open');
  const r1 = await s.join(0);
  for (let i = 0; i < 3; i++) await s.push(i, r1);
  await s.flush(r1);
  await s.push(3, r1); // never durable
  const lastId = r1.frames.filter((f) => f.id !== undefined).at(-1).id;
  await stack.kill();
  r1.close();
  await stack.restart();
  // The browser's own reconnect (same URL, Last-Event-ID past the durable text): the fresh
  // instance rebuilds the stream at its durable length, parks the reader, and (no resume window)
  // seals it at once, releasing the reader with the durable text and the end.
  const reconnect = await s.toEnd(await s.join(0, { 'last-event-id': lastId }));
  const text = await s.text();
  assert.equal(text.body.status, 'interrupted', 'the row is sealed');
  return fixture({
    streamId: s.id,
    description: 'The Durable Object lost the live stream (kill -9 and restart) while a reader held more than was durable. Its reconnect (Last-Event-ID past the durable text) wakes a fresh instance that rebuilds the stream at its durable length and, with no resume window, seals it `interrupted` at once: the parked reader is served from the durable length (`open` below its offset) and ends. The reader ends with exactly the durable text, not its longer live text.',
    connections: [{ from: 0, events: [...frames(r1), { transport: 'reconnect' }, ...reconnect] }],
    textResponses: [],
    expect: { text: text.body.text, produced: upTo(4), status: 'interrupted', durableSeq: text.body.seq, error: text.body.error ?? null, connections: 1, textFetches: 0 },
  });
}

/**
 * A sealed stream its object has let go of (here: the runtime was restarted since; in production
 * the object sleeps after the seal): the subscription is answered from the row with the frames the
 * lingering stream replayed (open, the text, durable, end), never `absent`; no /text is needed.
 */
async function endedFromRow(s) {
  const conn = await s.toEnd(await s.join(0));
  assert.equal(conn[0]?.type, 'open', `the row replayed: ${JSON.stringify(conn[0])}`);
  assert.equal(conn.at(-1)?.type, 'end');
  const text1 = await s.text();
  return fixture({
    streamId: s.id,
    description: 'The stream ended and its object has let go of it (it sleeps after the seal, or was reset): the subscription is answered from the row, with the frames the lingering stream replayed (open, the text, durable, end). The client ends with the durable text, without /text and without reconnecting.',
    connections: [{ from: 0, events: conn }],
    textResponses: [],
    expect: { text: text1.body.text, produced: TEXT, status: text1.body.status, durableSeq: text1.body.seq, error: text1.body.error ?? null, connections: 1, textFetches: 0 },
  });
}

/**
 * Records every fixture into `outDir`. `stack` runs with RECORDER_VARS and is restarted once
 * (evicted-streaming); `staleStack` runs with STALE_VARS. Returns the file names written.
 */
export async function recordFixtures(stack, staleStack, outDir = FIXTURES_DIR, log = () => {}) {
  mkdirSync(outDir, { recursive: true });
  const recorded = { by: 'tests/client/record-fixtures.mjs', at: new Date().toISOString().slice(0, 10) };
  const files = {};
  const out = { durableRows: [] };
  const put = (name, f) => {
    files[name] = { ...f, recorded };
    log(`recorded ${name}`);
  };
  const splice = await spliceEmoji(stack, out);
  put('splice-emoji', splice.fixture);
  put('late-join', await lateJoin(splice.stream));
  put('reconnect-overlap', await reconnectOverlap(stack));
  put('closed-rejoin', await closedRejoin(stack));
  put('gap', await gap(stack));
  put('stale-fallback', await staleFallback(staleStack));
  const ends = await endStatuses(stack, out);
  put('end-statuses', { description: 'One stream per way a live reader sees the end.', token: TOKEN, ...ends });
  put('evicted-streaming', await evictedStreaming(stack)); // kills and restarts the stack
  put('ended-from-row', await endedFromRow(splice.stream));
  put('durable-rows', { description: 'Message and chunk rows as D1 held them, with the /text the Worker answered for them: the Rust and JavaScript assemblers must both give `text`.', rows: out.durableRows });
  for (const [name, f] of Object.entries(files)) writeFileSync(join(outDir, `${name}.json`), `${JSON.stringify(f, null, 2)}\n`);
  return Object.keys(files).map((n) => `${n}.json`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const outDir = process.argv[2] ?? FIXTURES_DIR;
  const stack = await startStack({ name: 'record-fixtures', vars: RECORDER_VARS });
  const staleStack = await startStack({ name: 'record-fixtures-stale', vars: STALE_VARS });
  try {
    const names = await recordFixtures(stack, staleStack, outDir, (line) => console.log(line));
    console.log(`wrote ${names.length} fixtures to ${outDir}`);
  } finally {
    await Promise.all([stack.stop(), staleStack.stop()]);
  }
}
