// Surviving the object with real kills (SPEC §10, issue 35 "End to end, with the runtime
// killed"). A producer runs in its own Node process (producer-child.mjs: producer.js's pipe),
// one `text` answer and one `ui` answer, whose deltas carry emoji, CJK, ZWJ sequences and
// skin tones. Readers follow each: a real EventSource on /events from the start, one that
// joins late, and (ui) chat-transport's readUIStream fed to the real `ai` readUIMessageStream.
// The runtime (wrangler dev and workerd, its whole process group) is killed with SIGKILL and
// restarted at least 5 times per answer, at seeded points, each an event the test waits for
// (the producer is paced by the test, never by a clock):
//   during open        the open request has left the producer;
//   between checkpoints  a checkpoint is in D1 and the readers have everything released;
//   during a checkpoint round  right as released text crosses the checkpoint threshold;
//   right after a rehydration  a reader woke the restarted runtime, whose new instance rebuilt
//                      the stream (seen in /stats) while the producer's resumes waited: a second kill;
//   right after a resume  as soon as the producer reports its resume.
// Asserted: pipe resolves `complete`, the source was read once, the row is `complete` with
// exactly the produced text and no chunk rows, every reader's text is the produced text, the
// /ui message deep-equals the one built from the source (so no part is duplicated), and
// durableSeq never falls (D1 at every kill, the readers' `durable` frames, the resumes).
// E2E_SEED=<seed> replays the texts and the kill points.
import test from 'node:test';
import assert from 'node:assert/strict';
import { startStack } from '../e2e/harness.mjs';
import { api, durableFromDb, newStream, rng, seedFromEnv, until } from '../e2e/util.mjs';
import { signStreamToken } from '../../public/producer.js';
import { answerOf, assertSurvived, eventsReader, startProducer, STEP_MS, uiReader } from './support.mjs';

const CHECKPOINT_CHARS = 120;

let stack;
test.before(async () => {
  stack = await startStack({
    name: 'survival-kills',
    vars: { LEASE_MS: '3000', CHECKPOINT_CHARS: String(CHECKPOINT_CHARS), CHECKPOINT_INTERVAL_MS: '150' },
  });
});
test.after(async () => {
  await stack?.stop();
});

const KILL_POINTS = ['between checkpoints', 'during a checkpoint round', 'right after a rehydration', 'right after a resume'];

/** The seeded order: open first (it happens once), a resume's kill never right after it. */
function killPlan(r) {
  const rest = KILL_POINTS.filter((p) => p !== 'right after a resume');
  for (let i = rest.length - 1; i > 0; i--) {
    const j = r.int(0, i);
    [rest[i], rest[j]] = [rest[j], rest[i]];
  }
  rest.splice(r.int(1, rest.length), 0, 'right after a resume');
  return ['during open', ...rest];
}

for (const format of ['text', 'ui']) {
  test(`a ${format} answer survives kill -9 of the runtime at every kill point: complete, exactly the source, no seam for any reader`, { timeout: 300_000 }, async (t) => {
    const seed = seedFromEnv();
    const r = rng(seed);
    t.diagnostic(`E2E_SEED=${seed} (replays the text and the kill points)`);
    console.log(`# E2E_SEED=${seed} ${format}`);
    const id = newStream(stack, `kills-${format}`);
    const { pieces, encode } = answerOf(r, id, format);
    const wire = pieces.map(encode);
    const textUpTo = (n) => wire.slice(0, n).join('');
    const produced = textUpTo(pieces.length);
    const readToken = await signStreamToken({ secret: stack.secret, stream: id, scope: 'read' });
    const plan = killPlan(r);
    t.diagnostic(`kill points: ${plan.join(', ')}`);

    const producer = startProducer();
    t.after(() => producer.stop());
    const readers = [];
    const dbDurables = [];
    let released = 0;
    let kills = 0;
    const release = (upTo) => {
      released = Math.min(pieces.length, Math.max(released, upTo));
      producer.send({ type: 'release', upTo: released });
    };
    const delivered = () => readers[0]?.text.length ?? 0;
    const allDelivered = (what) => until(() => readers.every((x) => x.text.length >= textUpTo(released).length), `${what}: the readers to get the ${released} released pieces`, STEP_MS);
    const kill = async (point) => {
      dbDurables.push(durableText());
      await stack.kill();
      kills += 1;
      t.diagnostic(`kill ${kills} ${point}: released ${released}/${pieces.length}, reader at ${delivered()}/${produced.length}`);
      await stack.restart();
    };
    /** The durable length in D1 (row body + contiguous chunk rows). */
    const durableText = () => durableFromDb(stack.db, id)?.text.length ?? 0;

    // during open: the producer's open request has left; the kill may land before or after it took.
    const opening = producer.next((m) => m.type === 'request' && m.action === 'open', 'open request');
    producer.send({ type: 'go', baseUrl: stack.baseUrl, streamId: id, token: stack.token(id, 'write'), format, pieces, resume: { timeoutMs: 90_000 } });
    await opening;
    await kill('during open');
    await producer.next((m) => m.type === 'opened', 'open');
    readers.push(eventsReader(stack.baseUrl, id, readToken));
    const ui = format === 'ui' ? uiReader(stack.baseUrl, id, readToken) : undefined;

    const step = Math.floor(pieces.length / (plan.length + 2));
    for (const [i, point] of plan.slice(1).entries()) {
      if (i === 1) readers.push(eventsReader(stack.baseUrl, id, readToken)); // the late joiner
      const target = step * (i + 1) + r.int(0, Math.max(0, step - 2));
      if (point === 'between checkpoints') {
        // A checkpoint commits what was released, then two more pieces reach the readers: the
        // kill falls after that checkpoint with a tail the next one has not taken yet.
        release(target - 2);
        await allDelivered(point);
        await until(() => durableText() >= textUpTo(released).length, `${point}: a checkpoint of everything released in D1`, STEP_MS);
        release(target);
        await allDelivered(point);
        await kill(point);
      } else if (point === 'during a checkpoint round') {
        // Release up to the piece that crosses the next threshold, and kill as it reaches a reader.
        const threshold = (Math.floor(textUpTo(released).length / CHECKPOINT_CHARS) + 1) * CHECKPOINT_CHARS;
        let n = released;
        while (n < pieces.length && textUpTo(n).length < threshold) n++;
        release(n);
        await until(() => delivered() >= threshold, `${point}: the reader past ${threshold}`, STEP_MS);
        await kill(point);
      } else if (point === 'right after a rehydration') {
        release(target);
        await allDelivered(point);
        // The producer's resumes wait, so the new instance rebuilds the stream for a reader
        // (which wakes it, as any request but open, /text and /stats does), and is killed
        // rebuilt, before the producer took it over.
        producer.send({ type: 'hold-resumes' });
        await kill(`${point} (first, to leave a row to rehydrate)`);
        const waking = await api(stack, id, { token: readToken }).events(0);
        const rebuilt = await until(async () => {
          const res = await fetch(`${stack.baseUrl}/streams/${id}/stats`, { headers: { authorization: `Bearer ${stack.token(id, 'write')}` } });
          const s = await res.json();
          return res.status === 200 && s.rehydrated === true && s;
        }, `${point}: the new instance to rebuild the stream (/stats rehydrated)`, STEP_MS);
        waking.close();
        t.diagnostic(`${point}: rebuilt at ${rebuilt.seq} (durable ${rebuilt.durableSeq}, epoch ${rebuilt.epoch})`);
        assert.equal(rebuilt.seq, rebuilt.durableSeq, 'rebuilt at the durable length');
        await kill(point);
        producer.send({ type: 'unhold' });
      } else if (point === 'right after a resume') {
        release(target);
        await allDelivered(point);
        const since = producer.messages.length;
        await kill(`${point} (first, to make the producer resume)`);
        await producer.next((m) => m.type === 'resumed', 'resume', since);
        await kill(point);
      }
    }
    assert.ok(kills >= 5, `${kills} kills`);

    release(pieces.length);
    const resumes = await assertSurvived({ stack, id, producer, pieces, produced, readers, ui, durables: [dbDurables] });
    t.diagnostic(`resumes: ${resumes.map((m) => `${m.cause}@${m.seq}(+${m.resent})`).join(' ')}`);
    assert.ok(resumes.length >= 4, `the producer resumed after the kills (${resumes.length})`);
    assert.deepEqual(resumes.map((m) => m.durableSeq), [...resumes.map((m) => m.durableSeq)].sort((x, y) => x - y), 'durableSeq never falls (resumes)');
  });
}
