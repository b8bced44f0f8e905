// Contract S against the real runtime: readers join at random offsets and random times of
// a long emoji-heavy stream (checkpointing every 64 UTF-16 units into local D1) and each one
// rebuilds exactly the produced text from durable text + frames. Also: a streaming append
// whose pieces split multibyte characters arrives piecewise and exact.
import test from 'node:test';
import assert from 'node:assert/strict';
import { startStack } from './harness.mjs';
import {
  api, checkFrames, emojiText, insidePair, newStream, ok, openPost, rng, rows, seedFromEnv, sleep, splitCodePoints, untilEnd, withTimeout,
} from './util.mjs';

const CHECKPOINT_CHARS = 64;
let stack;

test.before(async () => {
  stack = await startStack({ name: 'e2e-splice', vars: { CHECKPOINT_CHARS: String(CHECKPOINT_CHARS) } });
});
test.after(async () => {
  await stack?.stop();
});

test('readers joining at random offsets and times rebuild exactly the produced emoji-heavy text (contract S)', { timeout: 240_000 }, async (t) => {
  const seed = seedFromEnv();
  t.diagnostic(`seed ${seed} (E2E_SEED=${seed} replays the text, the pieces and the join points)`);
  const r = rng(seed);
  const why = (msg) => `${msg} (seed ${seed}; rerun with E2E_SEED=${seed})`;
  const id = newStream(stack, 'splice');
  const s = api(stack, id);
  ok(await s.open(), 'open');

  const produced = emojiText(r, 20_000);
  assert.ok(produced.length >= 20_000);
  assert.ok(/[\uD800-\uDBFF][\uDC00-\uDFFF]/.test(produced) && /\u200d/.test(produced) && /\u0301/.test(produced), 'the text has astral characters, ZWJ sequences and combining marks');
  const pieces = splitCodePoints(produced, r, 1, 40);
  assert.ok(pieces.length >= 500, `${pieces.length} appends`);

  // Contract P, watched from outside: /text is always a prefix of the produced text and its
  // length never goes backwards (sequential reads only, so "before" and "after" are real).
  let lastDurable = 0;
  let textReads = 0;
  const readDurable = async (label) => {
    const d = ok(await s.text(), `${label}: /text`);
    assert.equal(d.seq, d.text.length, why(`${label}: /text seq is its UTF-16 length`));
    assert.ok(produced.startsWith(d.text), why(`${label}: /text (${d.seq} units) is not a prefix of the produced text`));
    return d;
  };
  let producing = true;
  const watcher = (async () => {
    while (producing) {
      const d = await readDurable(`watcher ${textReads}`);
      assert.ok(d.seq >= lastDurable, why(`durable length went backwards ${lastDurable} → ${d.seq}`));
      lastDurable = d.seq;
      textReads += 1;
      await sleep(40);
    }
  })();

  // Readers: each reads /text, picks f in [0, durable length] (some deliberately inside a
  // surrogate pair, some at the ends), subscribes from f, and reads to `end`. Each joins before
  // the piece the seed chose is appended (the producer waits for it), so E2E_SEED replays where.
  const readers = [];
  /** Starts reader n; resolves once it is attached (its open frame arrived), or has failed. */
  const startReader = (n) => {
    let attached;
    const joined = new Promise((resolve) => (attached = resolve));
    const p = (async () => {
      const d = await readDurable(`reader ${n}`);
      let f;
      const mode = n % 5;
      if (mode === 0) f = 0;
      else if (mode === 1) f = d.seq;
      else if (mode === 2) {
        const mids = [];
        for (let i = 1; i < d.seq; i++) if (insidePair(produced, i)) mids.push(i);
        f = mids.length ? r.pick(mids) : r.int(0, d.seq);
      } else f = r.int(0, d.seq);
      const sse = await s.events(f);
      attached();
      assert.equal(sse.status, 200, `reader ${n}: events status`);
      // Bounded by the test's timeout: on a loaded machine producing 20k units can take a minute.
      const frames = await untilEnd(sse, 230_000);
      const got = checkFrames(frames, `reader ${n} (from ${f})`);
      // SPEC §2: a from inside a surrogate pair moves down to the pair's start.
      const expectedFrom = insidePair(produced, f) ? f - 1 : f;
      assert.equal(got.open.from, expectedFrom, why(`reader ${n}: open.from for f=${f}`));
      assert.equal(got.open.streamId, id);
      assert.ok(got.end, why(`reader ${n}: no end frame: ${JSON.stringify(frames.at(-1))}`));
      assert.equal(got.end.status, 'complete');
      assert.equal(got.end.seq, produced.length, why(`reader ${n}: end.seq`));
      const rebuilt = d.text.slice(0, got.open.from) + got.text;
      assert.equal(rebuilt.length, produced.length, why(`reader ${n} from ${f}: rebuilt length`));
      assert.ok(rebuilt === produced, why(`reader ${n} from ${f}: durable prefix ++ frames != produced`));
      return { n, f, from: got.open.from, chunks: frames.length, durables: got.durables.length };
    })();
    p.catch(() => {}); // awaited below; keep an early failure from being "unhandled"
    p.then(attached, attached);
    readers.push(p);
    return joined;
  };

  let sent = 0;
  let lastReceipt = { seq: 0, durableSeq: 0 };
  const joinAt = new Set();
  while (joinAt.size < 24) joinAt.add(r.int(0, pieces.length - 1));
  let n = 0;
  for (const [i, piece] of pieces.entries()) {
    if (joinAt.has(i)) await startReader(n++);
    const rec = ok(await s.append(piece), `append ${i}`);
    sent += piece.length;
    assert.equal(rec.seq, sent, why(`append ${i}: seq`));
    assert.equal(rec.cancelled, false);
    assert.ok(rec.durableSeq <= rec.seq, why(`append ${i}: durableSeq ${rec.durableSeq} > seq ${rec.seq}`));
    assert.ok(rec.durableSeq >= lastReceipt.durableSeq, why(`append ${i}: durableSeq went backwards`));
    lastReceipt = rec;
    if (r() < 0.05) await sleep(r.int(1, 20)); // uneven pacing: the interval cadence commits at varied points
  }
  producing = false;
  await watcher;
  assert.ok(textReads >= 3, `the watcher read /text ${textReads} times`);

  // Before close: the chunk rows tile [0, durableSeq) exactly, each row's seq its END offset.
  const flushed = ok(await s.flush(), 'flush');
  assert.equal(flushed.durableSeq, produced.length);
  const { row, chunks } = rows(stack, id);
  assert.equal(row.status, 'streaming');
  assert.equal(row.seq, produced.length);
  let end = 0;
  for (const c of chunks) {
    assert.equal(c.id, `${id}:${c.seq}`, 'chunk row id is <streamId>:<seq>');
    assert.equal(c.text.length, c.seq - end, why(`chunk row ending at ${c.seq} has ${c.text.length} units, starts at ${end}`));
    end = c.seq;
  }
  assert.equal(end, produced.length);
  assert.ok(chunks.map((c) => c.text).join('') === produced, why('chunk rows joined != produced'));
  assert.ok(chunks.length >= 20, `only ${chunks.length} checkpoints with CHECKPOINT_CHARS=${CHECKPOINT_CHARS}`);
  const stats = ok(await s.stats(), 'stats');
  assert.equal(stats.checkpoints, chunks.length, 'one chunk row per checkpoint');
  assert.ok(stats.readers >= 1, 'readers are attached');

  // One more reader joins after the last checkpoint but before close: its replay ends at seq.
  await startReader(n++);
  const closed = ok(await s.close(), 'close');
  assert.deepEqual({ status: closed.status, seq: closed.seq, durableSeq: closed.durableSeq }, { status: 'complete', seq: produced.length, durableSeq: produced.length });
  // And one joins during the linger window (default 30 s): it gets the tail and `end`.
  startReader(n++);

  const results = await withTimeout(Promise.all(readers), 60_000, () => 'readers did not all finish within 60 s');
  assert.equal(results.length, 26);
  assert.ok(results.some((x) => x.from !== x.f), why('no reader joined inside a surrogate pair'));
  assert.ok(results.some((x) => x.from > 0), 'some reader joined past 0');

  const after = rows(stack, id);
  assert.equal(after.chunks.length, 0, 'compaction deleted the chunk rows');
  assert.ok(after.row.body === produced, 'the compacted body is the produced text');
});

test('a streaming append whose pieces split multibyte characters arrives piecewise and exact', { timeout: 60_000 }, async () => {
  const id = newStream(stack, 'pipe');
  const s = api(stack, id);
  ok(await s.open(), 'open');
  ok(await s.append('>'), 'plain append first');
  const reader = await s.events(0);
  const nextChunk = () => reader.next((f) => f.json?.type === 'chunk', 15_000);
  assert.equal((await nextChunk()).json.text, '>');

  const enc = (str) => [...Buffer.from(str, 'utf8')];
  const emoji = enc('😀'); // F0 9F 98 80
  const family = enc('👨‍👩‍👧'); // ZWJ sequence, 18 bytes
  const e9 = enc('é'); // C3 A9
  // Each piece, and the text a reader must see once it has arrived (null: nothing yet).
  const steps = [
    { bytes: [...enc('ab'), emoji[0]], expect: 'ab' }, // emoji split 1 / 3 / ... : ab + F0
    { bytes: [emoji[1], emoji[2]], expect: null }, // 9F 98: still incomplete
    { bytes: [emoji[3], ...enc('c'), e9[0]], expect: '😀c' }, // 80 completes it; é's first byte waits
    { bytes: [e9[1], ...family.slice(0, 5)], expect: 'é👨' }, // 👨 is 4 bytes, then ZWJ's first byte
    { bytes: family.slice(5, 13), expect: '\u200d👩' }, // ZWJ completes, 👩, then part of the next ZWJ
    { bytes: [...family.slice(13), ...enc(' done 🇯🇵')], expect: '\u200d👧 done 🇯🇵' },
  ];
  const produced = '>ab😀cé👨‍👩‍👧 done 🇯🇵';
  assert.equal(steps.map((x) => x.expect ?? '').join(''), produced.slice(1));

  // A body that hands over one step's bytes per pull: `send` waits for the body's next pull
  // (the upload asks for more), answers it, and `send()` with nothing ends the body.
  let onPull;
  let pulled = new Promise((resolve) => (onPull = resolve));
  const body = new ReadableStream({
    pull(controller) {
      return new Promise((resolve) =>
        onPull((bytes) => {
          if (bytes === undefined) controller.close();
          else controller.enqueue(new Uint8Array(bytes));
          resolve();
        }));
    },
  });
  const send = async (bytes) => {
    const answer = await pulled;
    pulled = new Promise((resolve) => (onPull = resolve));
    answer(bytes);
  };
  const response = fetch(s.url('append'), {
    method: 'POST',
    headers: { authorization: `Bearer ${s.token}`, 'content-type': 'text/plain; charset=utf-8' },
    body,
    duplex: 'half',
  });

  let seq = 1;
  for (const [i, step] of steps.entries()) {
    await send(step.bytes);
    if (step.expect === null) {
      // Nothing may surface from an incomplete character (no chunk, no U+FFFD): the next
      // step's chunk must start right where the last one ended and carry exactly its text.
      continue;
    }
    const f = (await nextChunk()).json;
    assert.equal(f.text, step.expect, `step ${i}: the reader sees this piece's complete characters, before the next piece is sent`);
    assert.equal(f.from, seq, `step ${i}: from`);
    assert.equal(f.seq, seq + step.expect.length, `step ${i}: seq counts UTF-16 units`);
    seq = f.seq;
    await sleep(150); // a pause between pieces: the request is still open
  }
  await send(); // end the body
  const res = await response;
  const out = JSON.parse(await res.text());
  assert.equal(res.status, 200, JSON.stringify(out));
  assert.deepEqual({ seq: out.seq, cancelled: out.cancelled }, { seq: produced.length, cancelled: false });

  const flushed = ok(await s.flush(), 'flush');
  assert.equal(flushed.durableSeq, produced.length);
  assert.equal(ok(await s.text(), '/text').text, produced);
  const closed = ok(await s.close(), 'close');
  assert.equal(closed.seq, produced.length);
  const frames = await untilEnd(reader);
  const got = checkFrames(frames, 'pipe reader');
  assert.equal(got.text, produced);
  assert.ok(!got.text.includes('\ufffd'), 'no replacement character');
  assert.equal(rows(stack, id).row.body, produced);
});

test('a streaming append ending inside a character is refused with bad_utf8 and keeps the complete part', { timeout: 30_000 }, async () => {
  const id = newStream(stack, 'pipe-bad');
  const s = api(stack, id);
  ok(await s.open(), 'open');
  const parts = [Buffer.from('ok '), Buffer.from([0xf0, 0x9f])]; // the body ends mid-emoji
  const body = new ReadableStream({
    async pull(c) {
      const p = parts.shift();
      if (p) {
        await sleep(50);
        c.enqueue(new Uint8Array(p));
      } else c.close();
    },
  });
  const res = await fetch(s.url('append'), {
    method: 'POST',
    headers: { authorization: `Bearer ${s.token}`, 'content-type': 'text/plain' },
    body,
    duplex: 'half',
  });
  const out = JSON.parse(await res.text());
  assert.equal(res.status, 400, JSON.stringify(out));
  assert.equal(out.error, 'bad_utf8');
  const stats = ok(await s.stats(), 'stats');
  assert.equal(stats.seq, 3, 'the complete part was pushed, the dangling bytes were not');
  const closed = ok(await s.close(), 'close');
  assert.equal(closed.seq, 3);
  assert.equal(ok(await s.text(), '/text').text, 'ok ');
});

test('a cancel ends a streaming append early with cancelled: true while its body is still open', { timeout: 30_000 }, async () => {
  const id = newStream(stack, 'pipe-cancel');
  const s = api(stack, id);
  ok(await s.open(), 'open');
  const reader = await s.events(0);
  // The producer sends one piece and then never finishes its body on its own.
  const post = openPost(s.url('append'), { authorization: `Bearer ${s.token}`, 'content-type': 'text/plain' });
  try {
    await post.send('partial 🚧');
    const first = await reader.next((f) => f.json?.type === 'chunk', 15_000);
    assert.equal(first.json.text, 'partial 🚧');
    ok(await s.cancel(), 'cancel');
    // The body never ends by itself: any answer at all is the cancel's doing.
    const res = await withTimeout(post.answer, 30_000, 'the streaming append did not answer after the cancel (its body is still open)');
    assert.equal(res.status, 200, res.text);
    const out = JSON.parse(res.text);
    assert.deepEqual({ seq: out.seq, cancelled: out.cancelled }, { seq: 'partial 🚧'.length, cancelled: true });
  } finally {
    post.destroy();
  }
  const closed = ok(await s.close(), 'close');
  assert.equal(closed.status, 'cancelled');
  const got = checkFrames(await untilEnd(reader), 'reader');
  assert.equal(got.end.status, 'cancelled');
  assert.equal(got.text, 'partial 🚧');
  assert.equal(rows(stack, id).row.status, 'cancelled');
});

test('a streaming append that starts after a cancel is answered at once with cancelled: true, before any piece of its body', { timeout: 30_000 }, async () => {
  // A producer's next streaming append can leave just as a cancel lands (between its resume's
  // re-sent tail and the append that follows): its model may be waiting on something and send
  // nothing for a long time, so the answer must not wait for a first piece.
  const id = newStream(stack, 'pipe-after-cancel');
  const s = api(stack, id);
  ok(await s.open(), 'open');
  ok(await s.append('before 🛑'), 'append');
  ok(await s.cancel(), 'cancel');
  const post = openPost(s.url('append'), { authorization: `Bearer ${s.token}`, 'content-type': 'text/plain' });
  try {
    // Its body stays open and empty: any answer at all is the cancel's doing.
    const res = await withTimeout(post.answer, 15_000, 'the streaming append after a cancel did not answer while its body is open and empty');
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(JSON.parse(res.text), { seq: 'before 🛑'.length, durableSeq: JSON.parse(res.text).durableSeq, cancelled: true });
  } finally {
    post.destroy();
  }
  assert.equal(ok(await s.close(), 'close').status, 'cancelled');
});

test('a small tail becomes durable by the interval cadence alone (no flush)', { timeout: 30_000 }, async () => {
  const id = newStream(stack, 'interval');
  const s = api(stack, id);
  ok(await s.open(), 'open');
  const reader = await s.events(0);
  const appended = ok(await s.append('tiny 🐜'), 'append'); // 7 units, far below CHECKPOINT_CHARS
  assert.equal(appended.durableSeq, 0, 'not committed by the append itself');
  const durable = await reader.next((f) => f.json?.type === 'durable', 15_000);
  assert.equal(durable.json.seq, 7);
  assert.equal(rows(stack, id).row.seq, 7);
  ok(await s.close(), 'close');
  reader.close();
});

test('a streaming append that goes over MAX_APPEND_BYTES is refused 413 at the end of its body, keeping what fit', { timeout: 30_000 }, async () => {
  // The object stops pushing at the limit, reads the rest of the body without keeping it, and
  // answers when the producer ends it: answering while the client is still sending breaks the
  // client's connection under wrangler dev's proxy (docs/API.md, "Appends").
  const id = newStream(stack, 'pipe-413');
  const s = api(stack, id);
  ok(await s.open(), 'open');
  const post = openPost(s.url('append'), { authorization: `Bearer ${s.token}`, 'content-type': 'text/plain' });
  const piece = 'y'.repeat(256 * 1024);
  for (let i = 0; i < 5; i++) await post.send(piece); // 5 × 256 KiB = 1.25 MiB > 1 MiB
  post.end();
  const res = await withTimeout(post.answer, 10_000, 'no answer within 10 s of the body ending');
  assert.equal(res.status, 413, res.text);
  const refused = JSON.parse(res.text);
  assert.equal(refused.error, 'too_large');
  assert.equal(refused.seq, 4 * 256 * 1024, 'the four pieces that fit were pushed, the fifth was not');
  const closed = ok(await s.close(), 'close: the stream is still usable');
  assert.equal(closed.seq, 4 * 256 * 1024);
  assert.equal(rows(stack, id).row.body, 'y'.repeat(4 * 256 * 1024));
});
