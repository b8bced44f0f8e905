// What a deploy does (SPEC §10, issue 35 "What a deploy does"): `wrangler dev` reloads a rebuilt
// Worker mid-answer, which resets the stream's object as a `wrangler deploy` does, while the
// producer (its own Node process, producer.js's pipe) keeps running. The write in flight fails
// as a reset: `wrangler dev` (4.86 and 4.164 alike) answers it with its own 503 ("Your worker
// restarted mid-request…", not the API's JSON), where a deployed Worker answers 503 `unavailable`
// quoting the object's "Durable Object reset because its code was updated". Each resume's cause
// and the runtime's words are printed. The stack serves a copy of the dev build, which the test
// rewrites 3 times at seeded points of a `ui` answer; each rewrite is a new Worker version.
// The same assertions as kills.test.mjs hold: pipe `complete`, the source read once, the row
// exactly the text with no chunk rows, every reader (EventSource from the start, a late
// joiner, /ui through `ai`) the source's text and message, durableSeq never falling. Each
// reload comes while D1's row holds less than the object took (checked, not left to chance), so
// every resume must start at D1's length and the producer re-send exactly the lost tail.
// E2E_SEED=<seed> replays the answer and the reload points.
import test from 'node:test';
import assert from 'node:assert/strict';
import { appendFileSync, cpSync, mkdirSync, mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, startStack } from '../e2e/harness.mjs';
import { newStream, rng, rows, seedFromEnv, until } from '../e2e/util.mjs';
import { answerOf, assertSurvived, eventsReader, startProducer, STEP_MS, uiReader } from './support.mjs';

const RELOADS = 3;
/** UI_CHECKPOINT_CHARS of the stack: a round starts only this far behind, and covers it all. */
const CHECKPOINT_CHARS = 400;

let stack;
let build;
test.before(async () => {
  // Inside the repository, so wrangler dev finds wrangler.toml above the copied script.
  mkdirSync(join(ROOT, 'test-artifacts'), { recursive: true });
  build = mkdtempSync(join(ROOT, 'test-artifacts', 'reload-'));
  cpSync(join(ROOT, 'build-dev'), build, { recursive: true });
  // Checkpoints by size only, so a reload finds an uncommitted tail.
  stack = await startStack({ name: 'survival-reload', script: join(build, 'worker', 'shim.mjs'), vars: { UI_CHECKPOINT_CHARS: String(CHECKPOINT_CHARS), CHECKPOINT_INTERVAL_MS: '600000' } });
});
test.after(async () => {
  await stack?.stop();
});

test(`a ui answer survives ${RELOADS} reloads of a rebuilt Worker mid-answer (a deploy): complete, exactly the source, no seam`, { timeout: 180_000 }, async (t) => {
  const seed = seedFromEnv();
  const r = rng(seed);
  t.diagnostic(`E2E_SEED=${seed} (replays the answer and the reload points)`);
  const id = newStream(stack, 'reload');
  const { pieces, encode } = answerOf(r, id, 'ui');
  const wire = pieces.map(encode);
  const textUpTo = (n) => wire.slice(0, n).join('');
  const produced = textUpTo(pieces.length);
  const readToken = stack.token(id, 'read');

  const producer = startProducer();
  t.after(() => producer.stop());
  producer.send({ type: 'go', baseUrl: stack.baseUrl, streamId: id, token: stack.token(id, 'write'), format: 'ui', pieces, resume: { timeoutMs: 90_000 } });
  await producer.next((m) => m.type === 'opened', 'open');
  const readers = [eventsReader(stack.baseUrl, id, readToken)];
  const ui = uiReader(stack.baseUrl, id, readToken);

  let released = 0;
  const release = (upTo) => producer.send({ type: 'release', upTo: (released = Math.min(pieces.length, upTo)) });
  const step = Math.floor(pieces.length / (RELOADS + 1));
  for (let k = 1; k <= RELOADS; k++) {
    release(step * k - r.int(0, Math.floor(step / 2)));
    // Reload only while D1's row holds less than the object took and no round is on its way to
    // commit the rest: a round starts CHECKPOINT_CHARS behind and covers all there is, so while
    // one is uncommitted the shortfall is at least that. A round that just covered everything (a
    // batch of pieces can arrive in one push) gets one more piece, which no round follows.
    const tail = await until(() => {
      const sent = textUpTo(released).length;
      if (!readers.every((x) => x.text.length >= sent)) return undefined;
      const durable = rows(stack, id).row.seq;
      if (durable === sent && released < pieces.length - 1) release(released + 1);
      return durable < sent && sent - durable < CHECKPOINT_CHARS && { durable, sent };
    }, () => `reload ${k}: the readers to get what was released, D1 to hold less (${rows(stack, id).row.seq} of ${textUpTo(released).length})`, STEP_MS);
    const since = producer.messages.length;
    const updates = (stack.logs().match(/Local server updated and ready/g) ?? []).length;
    appendFileSync(join(build, 'index.js'), `\n// rebuilt ${k}\n`); // a new version of the Worker
    await until(() => (stack.logs().match(/Local server updated and ready/g) ?? []).length > updates, `reload ${k}: wrangler dev to reload`, STEP_MS);
    const resumed = await producer.next((m) => m.type === 'resumed', `a resume after reload ${k}`, since);
    t.diagnostic(`reload ${k} at ${released}/${pieces.length} pieces (D1 ${tail.durable} of ${tail.sent}): resumed (${resumed.cause}: ${resumed.message}) at ${resumed.seq}, re-sent ${resumed.resent}`);
    assert.equal(resumed.cause, 'reset', `reload ${k}: the write in flight failed as a reset (${resumed.message})`);
    assert.deepEqual([resumed.seq, resumed.resent], [tail.durable, tail.sent - tail.durable], `reload ${k}: the new instance resumes at D1's length, and the producer re-sends exactly the tail it lost`);
    if (k === 1) readers.push(eventsReader(stack.baseUrl, id, readToken)); // the late joiner
  }
  release(pieces.length);
  const resumes = await assertSurvived({ stack, id, producer, pieces, produced, readers, ui });
  assert.ok(resumes.length >= RELOADS, `a resume per reload (${resumes.length})`);
  assert.deepEqual(resumes.map((m) => m.durableSeq), [...resumes.map((m) => m.durableSeq)].sort((x, y) => x - y), 'durableSeq never falls (resumes)');
});
