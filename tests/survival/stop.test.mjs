// Stop reaches the model (SPEC §10): a reader's cancel reaches the producer's `signal`
// (public/producer.js) within 1 s, and the model stops, in every state an answer can be in:
//   before the first append      the model has produced nothing yet (the mock holds it at token 0);
//   mid streaming append         the model is held mid-answer, its text in the stream;
//   during a refused streaming append  the runtime was killed and restarted while pipe's
//                                streaming append waited to leave: it reaches the rebuilt
//                                object without a resume, is refused (`resume_required`, its
//                                body read to its end), and the model runs on into it;
//   in the gap after a reset     killed and restarted mid-answer, the producer's resume not made
//                                yet (it waits at a gate): the cancel seals the rebuilt stream;
//   right after a resume         killed and restarted mid-answer, cancelled as the producer
//                                reports its resume, or (seeded) while the streaming append that
//                                follows waits to leave.
// Each state with two producers: one in this process over HTTP (`wrangler dev`'s URL, Node's
// fetch), one in a Worker through a service binding (the way users call rindle; its own
// `wrangler dev`, so rindle's runtime is killed alone). The model is the mock model server
// (mock/), called with `signal: stream.signal`; "stopped" is its connection closed by the
// producer. The latencies are printed; the 1 s bound is the guarantee, asserted. The states
// are waited for (holds, gates, /stats), never timed. E2E_SEED=<seed> replays the hold points
// and variants; STOP_ROUNDS=<n> runs every state n times (default 1); STOP_STATES=1,4 runs
// those states only (numbered as above).
import test from 'node:test';
import assert from 'node:assert/strict';
import { rng, seedFromEnv } from '../e2e/util.mjs';
import { KINDS, startRig, STATES, stopAt } from './stop/scenario.mjs';

const ROUNDS = Number(process.env.STOP_ROUNDS ?? 1);
/** The guarantee (SPEC §10): from the cancel's send to the producer's signal, and to the model stopped. */
const STOP_WITHIN_MS = 1_000;

let rig;
test.before(async () => {
  rig = await startRig({ name: 'survival-stop' });
});
test.after(async () => {
  await rig?.close();
});

for (const kind of KINDS) {
  test(`a cancel reaches the ${kind === 'node' ? 'producer over HTTP' : 'producer Worker (service binding)'} within 1 s in every state, and the model stops`, { timeout: 600_000 }, async (t) => {
    const seed = seedFromEnv();
    const r = rng(seed);
    t.diagnostic(`E2E_SEED=${seed} (replays the hold points and variants)`);
    console.log(`# E2E_SEED=${seed} ${kind}`);
    const slow = [];
    const states = process.env.STOP_STATES ? STATES.filter((_, i) => process.env.STOP_STATES.split(',').includes(String(i + 1))) : STATES;
    for (let round = 0; round < ROUNDS; round++) {
      for (const state of states) {
        const got = await stopAt(rig, kind, state, r, (line) => t.diagnostic(line));
        if (got.signalMs > STOP_WITHIN_MS || got.modelMs > STOP_WITHIN_MS) slow.push(got);
      }
    }
    assert.deepEqual(slow, [], `stopped later than ${STOP_WITHIN_MS} ms (E2E_SEED=${seed})`);
  });
}
