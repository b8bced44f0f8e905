// Stop reaches the model (SPEC §10): the rig and the five states of tests/survival/stop.test.mjs
// and bench/stop.mjs. A producer (produce.js) pipes the mock model's answer (the mock model
// server, in this process) through public/producer.js, either in this process over HTTP
// (`node`: wrangler dev's URL) or in a Worker through a service binding (`worker`: its own
// `wrangler dev`, joined to rindle's by a dev registry, so rindle's runtime is killed alone).
// Each answer is brought into one state, which the test waits for (the mock holds the model,
// a gate holds one request of the producer, the runtime is killed and restarted), never a
// moment on a clock; then a reader's cancel is sent and the time is taken until
//   signal  the producer's `stream.signal` fires (its own clock: the same machine's);
//   model   the model's connection is closed by the producer (the mock's `abortedAt`).
import { mkdtempSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startStack } from '../../e2e/harness.mjs';
import { api, newStream, rows, startHold, until, withTimeout } from '../../e2e/util.mjs';
import { startMockServer } from '../../../mock/model-server.mjs';
import { mockAnswer } from '../../../mock/mock-text.mjs';
import { gates, produce } from './produce.js';

const HERE = dirname(fileURLToPath(import.meta.url));
/** The producer Worker's config (worker.js). */
export const PRODUCER_CONFIG = join(HERE, 'wrangler.toml');

export const STATES = ['before the first append', 'mid streaming append', 'during a refused streaming append', 'in the gap after a reset', 'right after a resume'];
export const KINDS = ['node', 'worker'];
/** A bound for a step that hangs, far above a restart on a busy machine. */
export const STEP_MS = 45_000;
/** The model's pace where it runs on (tokens per second), and an answer longer than any test. */
const RATE = 40;
const ENDLESS = 20_000;

/** Every event a producer reported, per stream, and waiting for the next that matches. */
function eventLog() {
  const logs = new Map();
  return (streamId) => {
    if (!logs.has(streamId)) {
      const waiters = new Set();
      const list = [];
      logs.set(streamId, {
        list,
        push(event) {
          list.push(event);
          for (const w of [...waiters]) if (w.match(event)) {
            waiters.delete(w);
            w.resolve(event);
          }
        },
        /** The first event (already seen, or to come) that matches. */
        next(match, what) {
          const seen = list.find(match);
          if (seen) return Promise.resolve(seen);
          return withTimeout(new Promise((resolve) => waiters.add({ match, resolve })), STEP_MS, () => `${streamId}: no ${what}; events: ${JSON.stringify(list.slice(-10))}`);
        },
      });
    }
    return logs.get(streamId);
  };
}

/** rindle (killable alone), the producer Worker, the mock model, the hold and the report server. */
export async function startRig({ name = 'stop', vars = {} } = {}) {
  const registry = mkdtempSync(join(os.tmpdir(), 'rindle-registry-'));
  const hold = await startHold();
  const mock = await startMockServer({ port: 0 });
  const log = eventLog();
  const reports = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const { streamId, ...event } = JSON.parse(body);
      log(streamId).push(event);
      res.end('ok');
    });
  });
  await new Promise((resolve) => reports.listen(0, '127.0.0.1', resolve));
  const rindle = await startStack({ name: `${name}-rindle`, registry, vars });
  const worker = await startStack({ name: `${name}-producer`, config: PRODUCER_CONFIG, registry });
  return {
    rindle,
    worker,
    hold,
    mock,
    log,
    reportUrl: `http://127.0.0.1:${reports.address().port}/report`,
    async close() {
      await worker.stop();
      await rindle.stop();
      await hold.close();
      await mock.close();
      reports.closeAllConnections?.();
      await new Promise((resolve) => reports.close(resolve));
    },
  };
}

const postJson = async (url, body) => {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  if (!res.ok) throw new Error(`${url}: ${res.status} ${text}`);
  return JSON.parse(text);
};

/**
 * Starts producing `streamId` with a producer of `kind`: `{ arm(action, nth), log }`. `armed`:
 * holds armed before the first request (`[[action, nth]]`).
 */
async function startProducer(rig, kind, { streamId, modelUrl, armed = [] }) {
  const token = rig.rindle.token(streamId, 'write');
  const log = rig.log(streamId);
  if (kind === 'node') {
    const gate = gates(rig.hold.url, streamId);
    for (const [action, nth] of armed) gate.arm(action, nth);
    produce({ where: { baseUrl: rig.rindle.baseUrl }, send: (req) => fetch(req), streamId, token, modelUrl, gate, report: (e) => log.push(e) });
    return { arm: async (action, nth) => gate.arm(action, nth), log };
  }
  await postJson(`${rig.worker.baseUrl}/produce`, { streamId, token, modelUrl, holdUrl: rig.hold.url, reportUrl: rig.reportUrl, armed });
  return { arm: (action, nth) => postJson(`${rig.worker.baseUrl}/arm`, { streamId, action, nth }), log };
}

/** The mock's record of the model call made for `seed`, once there is one. */
async function modelCall(rig, seed) {
  const all = await (await fetch(`${rig.mock.url}/_mock/requests`)).json();
  return all.find((r) => r.query.seed === String(seed));
}

/** `/stats` of the stream (write scope): its JSON, or undefined while no stream is held there. */
async function stats(rig, id) {
  const res = await fetch(`${rig.rindle.baseUrl}/streams/${id}/stats`, { headers: { authorization: `Bearer ${rig.rindle.token(id, 'write')}` } }).catch(() => undefined);
  if (!res) return undefined;
  const body = await res.json().catch(() => undefined);
  return res.status === 200 ? body : undefined;
}

/**
 * Restarts rindle's runtime after a kill, and waits until the producer can reach it again.
 * Through the dev registry a restarted `wrangler dev` is out of the other one's reach until that
 * one reads the registry again (503 "Worker "rindle-streams" not found"): a local runtime's
 * artifact (the harness touches the registry to make it read it at once), which the producer
 * Worker is asked to see past (`POST /reach`: one request through its binding) before the state
 * starts. It is asked whatever the kind: a state of the other kind that ends in a restart
 * would otherwise leave the next Worker state opening into a binding that reaches nothing yet.
 */
async function restartRindle(rig) {
  await rig.rindle.restart();
  await until(async () => (await postJson(`${rig.worker.baseUrl}/reach`, {}).catch(() => ({}))).reached, 'the producer Worker to reach the restarted rindle', 60_000);
}

/**
 * Wakes the restarted runtime's new instance of the stream with a reader, whatever the producer
 * is doing, and waits until it rebuilt the stream (`/stats` only looks: it wakes nothing).
 */
async function rebuilt(rig, id) {
  const reader = await api(rig.rindle, id, { token: rig.rindle.token(id, 'read') }).events(0);
  try {
    await until(async () => (await stats(rig, id))?.rehydrated === true, 'the new instance to rebuild the stream', STEP_MS);
  } finally {
    reader.close();
  }
}

/**
 * One answer of producer `kind`, brought into `state`, then cancelled. Returns `{ state, kind,
 * signalMs, modelMs, note }` (from the cancel's send to the producer's signal, and to the model's
 * connection closing) once the answer has ended `cancelled`. `r`: the seeded draws.
 */
export async function stopAt(rig, kind, state, r, diagnostic = () => {}) {
  const { rindle, hold } = rig;
  const id = newStream(rindle, `stop-${kind}`);
  // The mock keys its holds and its records by seed, and both kinds replay one E2E_SEED: odd
  // for the Worker, even over HTTP, so the two never share a model call.
  const seed = 2 * r.int(1, 2 ** 29) + KINDS.indexOf(kind);
  const held = state === 'before the first append' || state === 'mid streaming append';
  const tokens = held ? r.int(8, 40) : ENDLESS;
  const at = state === 'before the first append' ? 0 : state === 'mid streaming append' ? r.int(1, tokens - 1) : undefined;
  if (at !== undefined) await fetch(`${rig.mock.url}/_mock/hold?seed=${seed}&at=${at}`, { method: 'POST' }).then((res) => res.arrayBuffer());
  const modelUrl = `${rig.mock.url}/v1/chat/completions?tokens=${tokens}&rate=${held ? 0 : RATE}&seed=${seed}`;
  const restart = async () => {
    await rindle.kill();
    await restartRindle(rig);
  };
  const seqNow = async () => (await stats(rig, id))?.seq ?? 0;
  const releases = [];
  let note = '';

  let producer;
  if (state === 'during a refused streaming append') {
    // The streaming append `pipe` sends after the open waits at a gate; the runtime is killed
    // and restarted meanwhile, and a reader wakes the new instance, which rebuilds the stream
    // and waits for a resume. The append then arrives without one: refused (`resume_required`),
    // its body read on while the model runs on into it.
    producer = await startProducer(rig, kind, { streamId: id, modelUrl, armed: [['append', 1]] });
    await producer.log.next((e) => e.type === 'opened', 'open');
    await withTimeout(hold.held(`${id}-append-1`), STEP_MS, 'the streaming append to reach its gate');
    await restart();
    await rebuilt(rig, id);
    hold.release(`${id}-append-1`);
    await until(async () => {
      const s = await stats(rig, id);
      return s?.meter?.requests?.append >= 1 && s;
    }, 'the held streaming append to reach the new instance', STEP_MS);
    await until(async () => (await modelCall(rig, seed))?.tokensSent >= 3, 'the model running on', STEP_MS);
    const s = await stats(rig, id);
    if (s.seq !== 0 || rig.log(id).list.some((e) => e.type === 'resumed')) throw new Error(`the streaming append was not refused: seq ${s.seq}, events ${JSON.stringify(rig.log(id).list)}`);
  } else {
    producer = await startProducer(rig, kind, { streamId: id, modelUrl });
    await producer.log.next((e) => e.type === 'opened', 'open');
    if (at !== undefined) {
      await until(async () => (await modelCall(rig, seed))?.held, () => `the model held; events: ${JSON.stringify(producer.log.list.slice(-10))}`, STEP_MS);
      const shown = mockAnswer({ seed, tokens }).textTokens.slice(0, at).join('').length;
      await until(async () => (await seqNow()) === shown, () => `the stream to hold the ${at} tokens before the model's hold (${shown} units)`, STEP_MS);
    } else {
      await until(async () => (await seqNow()) > 0, 'the answer streaming', STEP_MS);
    }
    if (state === 'in the gap after a reset') {
      // The producer's first resume after the kill waits at a gate (as its backoff would make it
      // wait), a reader wakes the new instance: the cancel lands while the rebuilt stream waits
      // for the producer, whose other requests are cut by the reset and being retried.
      await producer.arm('resume', 1);
      await restart();
      await withTimeout(hold.held(`${id}-resume-1`), STEP_MS, 'the resume to reach its gate');
      await rebuilt(rig, id);
      releases.push(`${id}-resume-1`);
    } else if (state === 'right after a resume') {
      // Either as soon as the producer reports its resume, or while the streaming append that
      // follows it (after the plain append re-sending the lost tail) waits at a gate to leave.
      // pipe's appends: the streaming one the kill cuts (1), the re-sent tail (2), the next streaming one (3).
      const gated = r.chance(0.5);
      await rindle.kill();
      if (gated) await producer.arm('append', 2);
      await restartRindle(rig);
      await producer.log.next((e) => e.type === 'resumed', 'a resume');
      if (gated) {
        await withTimeout(hold.held(`${id}-append-3`), STEP_MS, 'the streaming append after the resume to reach its gate');
        releases.push(`${id}-append-3`);
        note = 'its next streaming append held';
      } else note = 'as the resume is reported';
    }
  }

  const t0 = Date.now();
  const cancelled = await fetch(`${rindle.baseUrl}/streams/${id}/cancel`, { method: 'POST', headers: { authorization: `Bearer ${rindle.token(id, 'cancel')}` } });
  if (cancelled.status !== 200) throw new Error(`cancel: ${cancelled.status} ${await cancelled.text()}`);
  const signal = await producer.log.next((e) => e.type === 'signal', 'signal');
  for (const key of releases) hold.release(key);
  const model = await until(async () => (await modelCall(rig, seed))?.abortedAt && (await modelCall(rig, seed)), 'the model call aborted by the producer', STEP_MS);
  const ended = await producer.log.next((e) => e.type === 'ended' || e.type === 'failed', 'the end of pipe');
  if (ended.type !== 'ended' || ended.status !== 'cancelled') throw new Error(`pipe ended ${JSON.stringify(ended)}`);
  await until(() => rows(rindle, id).row?.status === 'cancelled', 'the row cancelled', STEP_MS);
  if (at !== undefined) await fetch(`${rig.mock.url}/_mock/release?seed=${seed}`, { method: 'POST' }).then((res) => res.arrayBuffer());
  const result = { state, kind, signalMs: signal.at - t0, modelMs: model.abortedAt - t0, note };
  if (process.env.STOP_DEBUG) diagnostic(JSON.stringify(producer.log.list.map((e) => ({ ...e, at: e.at && e.at - t0 }))));
  diagnostic(`${kind} · ${state}${note ? ` (${note})` : ''}: signal ${result.signalMs} ms, model stopped ${result.modelMs} ms`);
  return result;
}
