#!/usr/bin/env node
// The time from a restart of the runtime to the first resumed delta at a reader (SPEC §10),
// measured on the real Worker (wrangler dev: workerd, local D1) with real kills: one answer
// streams through public/producer.js's pipe (this process, which the kills never touch) at a
// model's pace; the runtime's process group is killed with SIGKILL at a seeded point of the
// answer and restarted, `--kills` times. For each restart, from the moment the restarted
// runtime answers (t0):
//   resume     the producer's POST /resume answered (its onResume hook);
//   delta      a reader joining at the offset it had reached before the kill gets its first
//              chunk: the producer resumed, re-sent what the reset lost, and the parked
//              reader was served from exactly its offset.
// The producer's backoff (100 ms doubling to 2 s, jittered) is part of the number: a resume
// can come no sooner than its next attempt after the runtime is back. The restart of
// wrangler dev itself (process start, the Worker's load) is before t0 and not counted.
//
//   node bench/resume-producer.mjs         # 20 kills, seed random (printed)
//   E2E_SEED=7 node bench/resume-producer.mjs --kills 5
import { parseArgs } from 'node:util';
import { readSse, startStack } from '../tests/e2e/harness.mjs';
import { emojiText, newStream, percentile, rng, rows, seedFromEnv, sleep, splitCodePoints, until } from '../tests/e2e/util.mjs';
import { openStream } from '../public/producer.js';

const { values: args } = parseArgs({ options: { kills: { type: 'string', default: '20' }, 'delta-ms': { type: 'string', default: '20' } } });
const KILLS = Number(args.kills);
const DELTA_MS = Number(args['delta-ms']);
const seed = seedFromEnv();
const r = rng(seed);
console.log(`E2E_SEED=${seed}: ${KILLS} kills, a delta every ${DELTA_MS} ms`);

const stack = await startStack({ name: 'bench-resume', vars: { LEASE_MS: '3000', CHECKPOINT_CHARS: '200', CHECKPOINT_INTERVAL_MS: '150' } });
try {
  const id = newStream(stack, 'bench-resume');
  const readToken = stack.token(id, 'read');
  let resumedAt;
  const stream = await openStream({ baseUrl: stack.baseUrl, streamId: id, token: stack.token(id, 'write'), resume: { timeoutMs: 120_000 }, onResume: () => (resumedAt ??= performance.now()) });
  let produced = '';
  let stop = false;
  const source = new ReadableStream({
    async pull(controller) {
      if (stop) return controller.close();
      await sleep(DELTA_MS); // the model's pace, not a synchronization
      const piece = splitCodePoints(emojiText(r, 12), r, 4, 12)[0];
      produced += piece;
      controller.enqueue(piece);
    },
  });
  const piped = stream.pipe(source);

  /** A reader from `from`: resolves with the first chunk frame's arrival time and its end offset. */
  const firstChunk = async (from) => {
    for (;;) {
      try {
        const sse = await readSse(`${stack.baseUrl}/streams/${id}/events?from=${from}&token=${encodeURIComponent(readToken)}`);
        const chunk = await sse.next((f) => f.json?.type === 'chunk', 60_000);
        const at = performance.now();
        sse.close();
        return { at, seq: chunk.json.seq };
      } catch (err) {
        if (!/fetch failed|ECONNREFUSED/.test(String(err?.cause?.code ?? err?.message))) throw err;
        await sleep(20);
      }
    }
  };

  // A follower keeps `position` (the end of the last chunk a reader got), reconnecting after kills.
  let position = 0;
  let following = true;
  const follower = (async () => {
    while (following) {
      try {
        const sse = await readSse(`${stack.baseUrl}/streams/${id}/events?from=${position}&token=${encodeURIComponent(readToken)}`);
        for (;;) {
          const f = await sse.next((x) => x.json?.type === 'chunk' || x.json?.type === 'end', 600_000);
          if (f.json.type === 'end') return;
          position = f.json.seq;
        }
      } catch {
        await sleep(20); // the runtime is down: try again
      }
    }
  })();

  const resumeMs = [];
  const deltaMs = [];
  for (let k = 0; k < KILLS; k++) {
    const target = position + r.int(50, 400); // a seeded amount of the answer flows before each kill
    await until(() => position >= target, `the answer past ${target}`, 60_000);
    const seen = position;
    await stack.kill();
    resumedAt = undefined;
    await stack.restart();
    const t0 = performance.now();
    const first = await firstChunk(seen);
    await until(() => resumedAt !== undefined, 'the resume', 60_000);
    // ≤ 0: the producer's resume got in before the harness's readiness probe was answered.
    resumeMs.push(resumedAt - t0);
    deltaMs.push(first.at - t0);
    process.stdout.write(`kill ${k + 1}: resume ${(resumedAt - t0).toFixed(0)} ms, first resumed delta ${(first.at - t0).toFixed(0)} ms\n`);
  }
  stop = true;
  const ended = await piped;
  following = false;
  await follower;
  const { row } = rows(stack, id);
  if (ended.status !== 'complete' || row.status !== 'complete' || row.body !== produced) {
    throw new Error(`the answer did not survive: pipe ${ended.status}, row ${row.status}, ${row.body.length} of ${produced.length} units`);
  }
  const report = (name, list) => {
    const sorted = [...list].sort((a, b) => a - b);
    return `${name} p50 ${percentile(sorted, 50).toFixed(0)} ms, p99 ${percentile(sorted, 99).toFixed(0)} ms`;
  };
  console.log(`${KILLS} kills, the answer complete and exact (${produced.length} units): ${report('restart → resume', resumeMs)}; ${report('restart → first resumed delta at a reader', deltaMs)}`);
} finally {
  await stack.stop();
}
