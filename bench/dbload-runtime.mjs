#!/usr/bin/env node
// Many answers at once on the real local runtime (wrangler dev: workerd, local D1 or Postgres)
// with the dev build's model of the database in front of it (docs/LOAD.md): each answer is a
// row inserted, an open, one streaming append at a model's pace (a third flush once mid-way), and
// a close; one reader per answer on /events from 0. Every answer must end `complete` with
// exactly its text (the close's answer, the row, /text, and the reader's splice: contract S);
// the figures: the checkpoint lag each reader saw (from a chunk's arrival to the `durable`
// frame covering it), open/flush/close latency, the most any stream stretched its cadence, and
// the database's traffic (/stats of every stream). tests/e2e/dbload.test.mjs runs it small.
//
//   node bench/dbload-runtime.mjs                                   # 40 answers, 40 ms a write, 20 s each
//   node bench/dbload-runtime.mjs --answers 60 --write-ms 80 --seconds 30 --json > result.json
//   node bench/dbload-runtime.mjs --cadence fixed                   # today's fixed cadence: where it breaks
//   RINDLE_E2E_BACKEND=postgres node bench/dbload-runtime.mjs --lanes 2 --write-ms 160   # PostgreSQL behind the model of a pool of 2
//   E2E_SEED=7 node bench/dbload-runtime.mjs                        # replays the texts and flush points
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { startStack } from '../tests/e2e/harness.mjs';
import { api, checkFrames, newStream, openPost, percentile, rng, rows, seedFromEnv, sleep } from '../tests/e2e/util.mjs';

const TOKENS = ['The ', 'answer', ' is', ' 42', ', ', 'and ', '日本語', ' 😀', ' 👍🏽', '👩‍💻', '.\n', ' streaming'];

/**
 * Runs `answers` answers at once on `stack` (a stack with the model: startStack({ model: true })),
 * each `seconds` long at `tokensPerSecond`; resolves with the report, whose `failures` say which
 * answer broke what (none may: tests/e2e/dbload.test.mjs).
 */
export async function runAnswers(stack, { answers, seconds, tokensPerSecond = 30, seed, startSpreadMs = 2000 }) {
  const r = rng(seed);
  const plans = Array.from({ length: answers }, (_, i) => {
    const tokens = Array.from({ length: Math.max(2, Math.round(seconds * tokensPerSecond)) }, () => r.pick(TOKENS));
    return { i, tokens, flushAt: r.chance(1 / 3) ? r.int(1, tokens.length - 1) : -1, startIn: r.int(0, startSpreadMs) };
  });
  const lags = [];
  const latency = { open: [], flush: [], close: [] };
  let maxStretch = 1;
  const one = async ({ i, tokens, flushAt, startIn }) => {
    await sleep(startIn); // answers do not all start in the same millisecond (the arrival, not a synchronization)
    const c = api(stack, newStream(stack, `load${i}`));
    const t0 = performance.now();
    const opened = await c.open();
    if (opened.status !== 200) throw new Error(`${c.id}: open answered ${opened.status} ${opened.raw}`);
    latency.open.push(performance.now() - t0);
    const reader = await c.events(0);
    const append = openPost(c.url('append'), { authorization: `Bearer ${c.token}`, 'content-type': 'text/plain; charset=utf-8' });
    let produced = '';
    for (const [k, token] of tokens.entries()) {
      await sleep(1000 / tokensPerSecond); // the model's pace
      produced += token;
      await append.send(token);
      if (k === flushAt) {
        const f0 = performance.now();
        const flushed = await c.flush();
        if (flushed.status !== 200) throw new Error(`${c.id}: flush answered ${flushed.status} ${flushed.raw}`);
        latency.flush.push(performance.now() - f0);
      }
      if (k % 20 === 0) {
        const stats = await c.stats();
        if (stats.status === 200) maxStretch = Math.max(maxStretch, stats.json.checkpointStretch ?? 1);
      }
    }
    append.end();
    const appended = await append.answer;
    if (appended.status !== 200) throw new Error(`${c.id}: the streaming append answered ${appended.status} ${appended.text}`);
    const stats = (await c.stats()).json;
    const c0 = performance.now();
    const closed = await c.close();
    if (closed.status !== 200 || closed.json.status !== 'complete') throw new Error(`${c.id}: close answered ${closed.status} ${closed.raw}`);
    latency.close.push(performance.now() - c0);
    await reader.done;
    const { durables } = checkFrames(reader.frames, { label: c.id, produced });
    // The lag each character waited: from its chunk's arrival to the durable frame covering it.
    const delivered = [];
    let durableAt = 0;
    for (const [k, f] of reader.frames.entries()) {
      const at = reader.arrivals[k];
      if (f.json?.type === 'chunk') delivered.push([f.json.seq, at]);
      if (f.json?.type === 'durable') {
        for (const [seq, arrived] of delivered) if (seq > durableAt && seq <= f.json.seq) lags.push(at - arrived);
        durableAt = f.json.seq;
      }
    }
    const { row, chunks } = rows(stack, c.id);
    const text = await c.text();
    if (text.status !== 200 || text.json.text !== produced || text.json.status !== 'complete') {
      throw new Error(`${c.id}: /text answered ${text.status} ${text.status === 200 ? `${text.json.status}, ${text.json.text.length} of ${produced.length} units` : text.raw}`);
    }
    if (row.status !== 'complete' || row.body !== produced || chunks.length !== 0) throw new Error(`${c.id}: the row is ${row.status}, ${chunks.length} chunk rows left`);
    return { id: c.id, units: produced.length, checkpoints: stats.checkpoints, retries: stats.retries, durables: durables.length, backend: stats.d1 ?? stats.postgres };
  };
  const failures = [];
  const started = performance.now();
  const settled = await Promise.allSettled(plans.map(one));
  for (const s of settled) if (s.status === 'rejected') failures.push(String(s.reason?.message ?? s.reason));
  const results = settled.filter((s) => s.status === 'fulfilled').map((s) => s.value);
  const sorted = (a) => [...a].sort((x, y) => x - y);
  const p = (a, q) => percentile(sorted(a), q);
  return {
    answers,
    seconds,
    tokensPerSecond,
    seed,
    wallSeconds: (performance.now() - started) / 1000,
    complete: results.length,
    failures,
    lagP50Ms: p(lags, 50),
    lagP99Ms: p(lags, 99),
    openP99Ms: p(latency.open, 99),
    flushP99Ms: p(latency.flush, 99),
    closeP99Ms: p(latency.close, 99),
    maxStretch,
    checkpoints: results.reduce((n, x) => n + x.checkpoints, 0),
    retries: results.reduce((n, x) => n + x.retries, 0),
    writeStatements: results.reduce((n, x) => n + (x.backend?.writeStatements ?? 0), 0),
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({
    options: {
      answers: { type: 'string', default: '40' },
      'write-ms': { type: 'string', default: '40' },
      'max-wait-ms': { type: 'string', default: '1000' },
      // Calls at once (DB_MODEL_LANES): D1 is 1; a Postgres pool 10 unless given.
      lanes: { type: 'string' },
      seconds: { type: 'string', default: '20' },
      'tokens-per-second': { type: 'string', default: '30' },
      // fixed: today's cadence (CHECKPOINT_MAX_STRETCH=1, STORE_PATIENCE_MS=0), to see it break.
      cadence: { type: 'string', default: 'adaptive' },
      json: { type: 'boolean', default: false },
    },
  });
  const seed = seedFromEnv();
  const vars = { DEV_MODE: '1', DB_MODEL_WRITE_MS: values['write-ms'], DB_MODEL_MAX_WAIT_MS: values['max-wait-ms'] };
  if (values.lanes !== undefined) vars.DB_MODEL_LANES = values.lanes;
  if (values.cadence === 'fixed') Object.assign(vars, { CHECKPOINT_MAX_STRETCH: '1', STORE_PATIENCE_MS: '0' });
  else if (values.cadence !== 'adaptive') throw new Error(`--cadence ${values.cadence}: fixed or adaptive`);
  const stack = await startStack({ name: 'bench-dbload', model: true, vars });
  try {
    const report = await runAnswers(stack, {
      answers: Number(values.answers),
      seconds: Number(values.seconds),
      tokensPerSecond: Number(values['tokens-per-second']),
      seed,
    });
    const out = { ...report, backend: stack.backend, cadence: values.cadence, writeMs: Number(values['write-ms']), maxWaitMs: Number(values['max-wait-ms']), lanes: vars.DB_MODEL_LANES };
    console.log(values.json ? JSON.stringify(out, null, 2) : `E2E_SEED=${seed}\n${JSON.stringify(out, null, 2)}`);
  } finally {
    await stack.stop();
  }
}
