// A database's worth of answers on the real local runtime (SPEC §13): wrangler dev with the dev
// build's model of the database in front of local D1 (or, in the Postgres pass, PostgreSQL behind
// the model of a small pool), at a write time the answers saturate: 16 answers at once at 30
// tokens a second for 8 s, one streaming append each, a third flushing once, one reader each.
// At today's fixed cadence their checkpoints alone would ask 1.7 times what the database gives
// (16 × 1.33 a second × 80 ms), and past half a second of waiting the model answers D1's own
// overload error. Every open, flush, append and close must answer 200, every answer end
// `complete` with exactly its text (the row, /text and the reader's splice), and the cadence must
// have stretched (the model was in the way). bench/dbload-runtime.mjs runs the same at larger
// sizes (docs/LOAD.md, "On the local runtime").
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { startStack } from './harness.mjs';
import { seedFromEnv } from './util.mjs';
import { runAnswers } from '../../bench/dbload-runtime.mjs';

let stack;
const seed = seedFromEnv();

before(async () => {
  // On Postgres the model is a pool of two connections, each transaction holding one 160 ms:
  // the same 12.5 transactions a second as one D1 lane at 80 ms.
  const postgres = (process.env.RINDLE_E2E_BACKEND ?? 'd1') === 'postgres';
  const model = postgres ? { DB_MODEL_WRITE_MS: '160', DB_MODEL_LANES: '2' } : { DB_MODEL_WRITE_MS: '80' };
  stack = await startStack({ name: 'dbload', model: true, vars: { DEV_MODE: '1', DB_MODEL_MAX_WAIT_MS: '500', ...model } });
});

after(async () => {
  await stack?.stop();
});

test('16 answers at once on a saturated database all end complete with exactly their text, the cadence stretched', { timeout: 180_000 }, async (t) => {
  t.diagnostic(`seed ${seed} (E2E_SEED=${seed} replays the texts, flush points and arrivals)`);
  const report = await runAnswers(stack, { answers: 16, seconds: 8, seed });
  t.diagnostic(JSON.stringify({ ...report, failures: report.failures.length }));
  assert.deepEqual(report.failures, [], `every answer complete and exact (seed ${seed})`);
  assert.equal(report.complete, 16);
  assert.ok(report.maxStretch > 1, `the model saturated the database: some stream stretched its cadence (${report.maxStretch})`);
});
