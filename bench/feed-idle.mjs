#!/usr/bin/env node
// What a chat's tabs cost while they wait, and how soon a turn reaches all of them (SPEC §11: an
// open tab costs nothing). One stack (served bare: miniflare, no dev proxy), one chat per size;
// each tab is a lean SSE reader (node:http, as a browser's EventSource reads: the relayed
// `GET {prefix}/chats/{chat}/events`).
//
// For 1, 100 and 1,000 tabs (--tabs):
//   - connecting them: the chat's object awake time per tab that connects (each wakes it: the
//     socket, its replay);
//   - idle: `--idle` seconds with every tab connected and no turn: the object's awake time (its
//     meter, /dev/feed-stats, kept across its instances) and its instances (a new one is the
//     runtime's proof it slept), as GB-s an hour (Cloudflare bills 128 MB per object);
//   - turns: `--turns` turns, one every 2 s, each through public/producer.js (open naming the chat
//     and the user's message, one append, close): from the open request to the turn's `start` at
//     every tab, p50/p99 over every (turn, tab), and from the open's answer (the notice and the
//     fan-out alone).
//
//   node bench/feed-idle.mjs                        # 1, 100, 1000 tabs, 60 s idle, 10 turns (≈6 min)
//   node bench/feed-idle.mjs --tabs 1000 --idle 30 --turns 20 [--json] [--no-save]
//   node bench/feed-idle.mjs --tabs 1000 --idle 5 --profile F   # a CPU profile of the isolate over
//     the largest size's turns (bench/profile.mjs --analyze F), with each turn's open marked in it
// The report goes to bench/results/<date>-<commit>-feed-idle.json (not with --no-save). A build set
// aside with `bench/compare.mjs --snapshot NAME` runs with RINDLE_ROOT=$TMPDIR/rindle-variants/NAME
// (A/B in one sitting; its report goes under that root).
import { execFileSync } from 'node:child_process';
import http from 'node:http';
import { mkdirSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { parseArgs } from 'node:util';
import { ROOT, mintToken, startStack } from '../tests/e2e/harness.mjs';
import { percentile, sleep, until } from '../tests/e2e/util.mjs';
import { openStream } from '../public/producer.js';
import { OBJECT_GB } from './cost.mjs';
import { connectInspector } from './inspector.mjs';

const { values: args } = parseArgs({
  options: {
    tabs: { type: 'string', default: '1,100,1000' },
    idle: { type: 'string', default: '60' },
    turns: { type: 'string', default: '10' },
    json: { type: 'boolean' },
    'no-save': { type: 'boolean' },
    profile: { type: 'string' },
  },
});
const SIZES = args.tabs.split(',').map(Number);
const IDLE_MS = Number(args.idle) * 1000;
const TURNS = Number(args.turns);
const log = (line) => (args.json ? process.stderr : process.stdout).write(`${line}\n`);

// FEED_MAX_READERS above the largest size; tokens that outlive the run.
const stack = await startStack({ name: 'bench-feed-idle', bare: true, vars: { DEV_MODE: '1', FEED_MAX_READERS: String(Math.max(...SIZES) + 10) } });
const lines = [{ type: 'start' }, { type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: 'Sunny in 東京 👍🏽' }, { type: 'text-end', id: 't' }, { type: 'finish' }];
const feedStats = async (chat) => (await fetch(`${stack.baseUrl}/dev/feed-stats?chat=${chat}`)).json();

/** A tab: a lean SSE reader of the chat's feed; `onEvent(json, at)` per data event. */
function tab(chat, token, onEvent) {
  let req;
  const ready = new Promise((resolve, reject) => {
    req = http.get(`${stack.baseUrl}/streams/chats/${chat}/events?token=${token}`, { agent: false }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`feed: ${res.statusCode}`));
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (d) => {
        buf += d;
        for (let i; (i = buf.indexOf('\n\n')) >= 0; ) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const line = block.split('\n').find((l) => l.startsWith('data: '));
          if (!line) continue;
          const json = JSON.parse(line.slice(6));
          if (json.type === 'ready') resolve();
          onEvent(json, performance.now());
        }
      });
    });
    req.on('error', reject);
  });
  return { ready, close: () => req.destroy() };
}

async function turn(chat, i) {
  const streamId = `fi-${chat}-${i}`;
  stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES (?, ?, 'assistant')`, streamId, chat);
  const token = mintToken({ sub: 'bench', stream: streamId, scope: 'write read' }, stack.secret);
  const userMessage = { id: `u-${streamId}`, role: 'user', parts: [{ type: 'text', text: `Question ${i}?` }] };
  const t0 = performance.now();
  const stream = await openStream({ baseUrl: stack.baseUrl, streamId, token, format: 'ui', chat: { id: chat, userMessage } });
  const t1 = performance.now();
  await stream.append(lines);
  await stream.close();
  return { streamId, t0, t1 };
}

const sorted = (xs) => [...xs].sort((a, b) => a - b);
const dist = (xs) => ({ p50: +percentile(sorted(xs), 50).toFixed(1), p99: +percentile(sorted(xs), 99).toFixed(1), max: +Math.max(...xs).toFixed(1), n: xs.length });

/** The isolate's CPU profile over the turns; saved with each turn's times (this process's clock). */
async function startProfiler() {
  const session = await connectInspector(stack.inspectorPort);
  await session.send('Profiler.enable');
  await session.send('Profiler.setSamplingInterval', { interval: 500 });
  await session.send('Profiler.start');
  const startedAt = performance.now();
  const turns = [];
  return {
    turns,
    save: async (file) => {
      const { profile } = await session.send('Profiler.stop');
      await session.close();
      writeFileSync(file, JSON.stringify(profile));
      writeFileSync(`${file}.turns.json`, JSON.stringify({ startedAt, turns }));
      log(`profile: ${file} (turns: ${file}.turns.json)`);
    },
  };
}

async function measure(n) {
  const chat = `idle-${n}-${process.pid}`;
  const token = mintToken({ sub: 'bench', scope: 'read', claims: { chat } }, stack.secret);
  const starts = new Map(); // streamId → [arrival per tab]
  const onEvent = (json, at) => {
    if (json.type === 'start') starts.set(json.streamId, [...(starts.get(json.streamId) ?? []), at]);
  };
  const s0 = await feedStats(chat);
  const tabs = [];
  for (let i = 0; i < n; i += 50) {
    const batch = Array.from({ length: Math.min(50, n - i) }, () => tab(chat, token, onEvent));
    await Promise.all(batch.map((t) => t.ready));
    tabs.push(...batch);
  }
  const connected = await feedStats(chat);
  if (connected.sockets !== n) throw new Error(`${n} tabs, ${connected.sockets} sockets`);
  // One turn before the idle window, so the feed has a history and its object something to forget.
  const first = await turn(chat, 0);
  await until(() => starts.get(first.streamId)?.length === n, `the first turn at ${n} tabs`, 60_000);
  await sleep(2000); // let the turn's own work settle before the window opens (not a synchronization)
  const idleStart = await feedStats(chat);
  await sleep(IDLE_MS); // the idle window itself
  const idleEnd = await feedStats(chat);
  const samples = { openToStart: [], answeredToStart: [], open: [], trivial: [] };
  for (let i = 0; i < 5; i++) {
    const t = performance.now();
    await (await fetch(`${stack.baseUrl}/dev/objects`)).text();
    samples.trivial.push(performance.now() - t);
  }
  const profiler = args.profile && n === Math.max(...SIZES) ? await startProfiler() : null;
  const turnsStart = await feedStats(chat);
  for (let i = 1; i <= TURNS; i++) {
    const t = await turn(chat, i);
    await until(() => starts.get(t.streamId)?.length === n, `turn ${i} at ${n} tabs`, 60_000);
    profiler?.turns.push({ i, t0: t.t0, t1: t.t1, starts: starts.get(t.streamId) });
    samples.open.push(t.t1 - t.t0);
    if (process.env.PER_TURN) log(`  turn ${i}: open ${(t.t1 - t.t0).toFixed(0)} ms, start at tabs ${dist(starts.get(t.streamId).map((at) => at - t.t0)).p50}/${dist(starts.get(t.streamId).map((at) => at - t.t0)).max} ms`);
    for (const at of starts.get(t.streamId)) {
      samples.openToStart.push(at - t.t0);
      samples.answeredToStart.push(at - t.t1);
    }
    await sleep(2000); // the turns' pace
  }
  const turnsEnd = await feedStats(chat);
  if (profiler) await profiler.save(args.profile);
  for (const t of tabs) t.close();
  const idleAwakeMs = idleEnd.meter.awakeMs - idleStart.meter.awakeMs;
  return {
    tabs: n,
    connectAwakeMsPerTab: +((connected.meter.awakeMs - s0.meter.awakeMs) / n).toFixed(2),
    idle: {
      seconds: IDLE_MS / 1000,
      awakeMs: idleAwakeMs,
      newInstances: idleEnd.counts.constructions - idleStart.counts.constructions,
      gbSecondsPerHour: +((OBJECT_GB * idleAwakeMs) / 1000 * (3_600_000 / IDLE_MS)).toFixed(4),
    },
    perTurn: {
      awakeMs: +((turnsEnd.meter.awakeMs - turnsStart.meter.awakeMs) / TURNS).toFixed(2),
      notices: (turnsEnd.counts.notices - turnsStart.counts.notices) / TURNS,
      keysWritten: (turnsEnd.counts.keysWritten - turnsStart.counts.keysWritten) / TURNS,
      keysDeleted: (turnsEnd.counts.keysDeleted - turnsStart.counts.keysDeleted) / TURNS,
      setAlarms: (turnsEnd.meter.storage.setAlarms - turnsStart.meter.storage.setAlarms) / TURNS,
    },
    latencyMs: { openToStart: dist(samples.openToStart), answeredToStart: dist(samples.answeredToStart), openRequest: dist(samples.open), trivial: dist(samples.trivial) },
  };
}

const runs = [];
for (const n of SIZES) {
  const r = await measure(n);
  runs.push(r);
  log(`  per turn: ${JSON.stringify(r.perTurn)}`);
  log(`${n} tabs: connect ${r.connectAwakeMsPerTab} ms awake per tab; idle ${r.idle.seconds} s → ${r.idle.awakeMs} ms awake, ${r.idle.newInstances} new instance(s), ${r.idle.gbSecondsPerHour} GB-s/hour; open → start p50 ${r.latencyMs.openToStart.p50} p99 ${r.latencyMs.openToStart.p99} ms; answered → start p50 ${r.latencyMs.answeredToStart.p50} p99 ${r.latencyMs.answeredToStart.p99} ms; the open request p50 ${r.latencyMs.openRequest.p50} max ${r.latencyMs.openRequest.max} ms; a trivial request p50 ${r.latencyMs.trivial.p50} ms`);
}
await stack.stop();

const report = {
  // A snapshot's root (bench/compare.mjs --snapshot NAME, run with RINDLE_ROOT) is no git checkout: its name.
  commit: process.env.RINDLE_ROOT ? basename(ROOT) : execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT }).toString().trim(),
  date: new Date().toISOString().slice(0, 10),
  runtime: 'wrangler 4.164.0 / workerd 2026-11-17, served bare',
  before: { gbSecondsPerHour: +(OBJECT_GB * 3600).toFixed(1), why: 'the object answered SSE itself: awake while any tab was connected' },
  runs,
};
if (args.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
if (!args['no-save']) {
  const dir = join(ROOT, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${report.date}-${report.commit}-feed-idle.json`);
  writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
  log(`saved ${file}`);
}
