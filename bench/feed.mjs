#!/usr/bin/env node
// The chat feed (SPEC §11), measured: how soon a turn reaches a second tab, and what the feed costs
// per turn in Cloudflare's billing units. One stack (wrangler dev: workerd, local D1), one chat;
// each turn is what the example's producer does (public/producer.js: open a `ui` stream naming the
// chat and the user's message, one append, close) while `--tabs` readers follow the chat's feed
// with the `eventsource` package (a browser tab's EventSource, in Node).
//
// Latency (timed, one sitting): from the producer's open request to the turn's `start` at a tab
// (the open's own D1 round trips, the notice, the fan-out), from the open's answer to it (the
// notice alone), and from the close request to the turn's `end` at a tab (the seal, the notice).
//
// Cost (counted): the feed object's counts (GET /dev/feed-stats: notices, its storage keys written,
// deleted and read, its reads of the chat's rows, alarms, awake time) over the turns, and the
// stream objects' extra work for a chat (the `chat` key, the open's read of the row's chat: the
// same turns opened without `chat`, their /stats compared).
//
//   node bench/feed.mjs                 # 40 turns, 2 tabs (≈1 min)
//   node bench/feed.mjs --turns 100 --tabs 5 [--json] [--no-save]
// The report goes to bench/results/<date>-<commit>-feed.json (not with --no-save).
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { EventSource } from 'eventsource';
import { ROOT, mintToken, startStack } from '../tests/e2e/harness.mjs';
import { percentile, until } from '../tests/e2e/util.mjs';
import { openStream } from '../public/producer.js';
import { OBJECT_GB } from './cost.mjs';

const { values: args } = parseArgs({
  options: { turns: { type: 'string', default: '40' }, tabs: { type: 'string', default: '2' }, json: { type: 'boolean' }, 'no-save': { type: 'boolean' } },
});
const TURNS = Number(args.turns);
const TABS = Number(args.tabs);
const log = (line) => (args.json ? process.stderr : process.stdout).write(`${line}\n`);

const stack = await startStack({ name: 'bench-feed', bare: true, vars: { DEV_MODE: '1' } }); // DEV_MODE: /dev/feed-stats
const chat = `bench-chat-${process.pid}`;
const chatToken = mintToken({ sub: 'bench', scope: 'read', claims: { chat } }, stack.secret);
const lines = [{ type: 'start' }, { type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: 'Sunny in 東京 👍🏽' }, { type: 'text-end', id: 't' }, { type: 'finish' }];

/** Feed events as the tabs saw them: stream id → type → [arrival ms per tab]. */
const seen = new Map();
const note = (event) => {
  const data = JSON.parse(event.data);
  if (!data.streamId) return;
  const byType = seen.get(data.streamId) ?? new Map();
  seen.set(data.streamId, byType);
  byType.set(data.type, [...(byType.get(data.type) ?? []), performance.now()]);
};
const tabs = [];
for (let i = 0; i < TABS; i++) {
  const es = new EventSource(`${stack.baseUrl}/streams/chats/${chat}/events?token=${chatToken}`);
  es.onmessage = note;
  tabs.push(es);
}
const feedStats = async () => (await fetch(`${stack.baseUrl}/dev/feed-stats?chat=${chat}`)).json();
await until(() => feedStats().then((s) => s.counts?.subscribes === TABS), 'every tab subscribed');

/** One turn through the producer helpers; `withChat: false` opens the same stream without naming the chat. */
async function turn(i, withChat, { watched = true } = {}) {
  const streamId = `bench-${withChat ? 'c' : 'n'}-${process.pid}-${i}`;
  stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES (?, ?, 'assistant')`, streamId, chat);
  const token = mintToken({ sub: 'bench', stream: streamId, scope: 'write read' }, stack.secret);
  const userMessage = { id: `u-${streamId}`, role: 'user', parts: [{ type: 'text', text: `Question ${i}: the weather?` }] };
  const t0 = performance.now();
  const stream = await openStream({ baseUrl: stack.baseUrl, streamId, token, format: 'ui', ...(withChat ? { chat: { id: chat, userMessage } } : {}) });
  const t1 = performance.now();
  await stream.append(lines);
  const t2 = performance.now();
  await stream.close();
  const stats = await (await fetch(`${stack.baseUrl}/streams/${streamId}/stats`, { headers: { authorization: `Bearer ${token}` } })).json();
  if (!withChat || !watched) return { stats };
  await until(() => (seen.get(streamId)?.get('end')?.length ?? 0) === TABS, `${streamId}'s end at every tab`);
  const at = seen.get(streamId);
  return { stats, openToStart: at.get('start').map((t) => t - t0), answeredToStart: at.get('start').map((t) => t - t1), closeToEnd: at.get('end').map((t) => t - t2) };
}

const before = await feedStats();
const t0 = performance.now();
const withChat = [];
for (let i = 0; i < TURNS; i++) withChat.push(await turn(i, true));
const runMs = performance.now() - t0;
const after = await feedStats();
const without = [];
for (let i = 0; i < TURNS; i++) without.push(await turn(i, false));
for (const es of tabs) es.close();

// The feed object with no tab connected: what a turn costs it beyond its readers' connections
// (a tab that closed is seen gone at the next write to it). One turn first wakes the object (an
// idle object may have been evicted: its first request loads the history and reads the chat's
// rows), then the turns are counted on that instance.
let last;
const idle = () => feedStats().then((s) => ((last = s), s.meter.holds === 0));
await until(idle, () => `the feed object idle (no reader, no timer): ${JSON.stringify(last)}`, 30_000);
await turn(TURNS, true, { watched: false });
await until(idle, () => `the feed object idle: ${JSON.stringify(last)}`);
const quietStart = await feedStats();
const QUIET = 10;
for (let i = TURNS + 1; i <= TURNS + QUIET; i++) await turn(i, true, { watched: false });
await until(idle, () => `the feed object idle again: ${JSON.stringify(last)}`);
const quietEnd = await feedStats();
await stack.stop();

const sorted = (xs) => [...xs].sort((a, b) => a - b);
const dist = (xs) => ({ p50: +percentile(sorted(xs), 50).toFixed(1), p99: +percentile(sorted(xs), 99).toFixed(1), n: xs.length });
const per = (a, b, key, n) => (b[key] - a[key]) / n;
const diffCounts = (a, b, n) => Object.fromEntries(Object.keys(b.counts).map((k) => [k, per(a.counts, b.counts, k, n)]));
const storage = (a, b, n) => Object.fromEntries(Object.keys(b.meter.storage).map((k) => [k, per(a.meter.storage, b.meter.storage, k, n)]));
const mean = (xs) => xs.reduce((s, x) => s + x, 0) / xs.length;
const streamSide = (k) => mean(withChat.map((t) => t.stats.meter.storage[k])) - mean(without.map((t) => t.stats.meter.storage[k]));
const d1 = (k) => mean(withChat.map((t) => t.stats.d1[k])) - mean(without.map((t) => t.stats.d1[k]));

const report = {
  commit: execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT }).toString().trim(),
  date: new Date().toISOString().slice(0, 10),
  turns: TURNS,
  tabs: TABS,
  latencyMs: {
    openToStart: dist(withChat.flatMap((t) => t.openToStart)),
    answeredToStart: dist(withChat.flatMap((t) => t.answeredToStart)),
    closeToEnd: dist(withChat.flatMap((t) => t.closeToEnd)),
  },
  perTurn: {
    feed: { ...diffCounts(before, after, TURNS), storage: storage(before, after, TURNS), alarms: per(before.meter, after.meter, 'alarms', TURNS) },
    feedWithoutTabs: {
      ...diffCounts(quietStart, quietEnd, QUIET),
      storage: storage(quietStart, quietEnd, QUIET),
      awakeMs: per(quietStart.meter, quietEnd.meter, 'awakeMs', QUIET),
      alarms: per(quietStart.meter, quietEnd.meter, 'alarms', QUIET),
    },
    streamObject: { puts: streamSide('puts'), gets: streamSide('gets'), d1Rounds: d1('rounds'), d1RowsRead: d1('rowsRead'), d1RowsWritten: d1('rowsWritten') },
  },
  // What waking the feed object costs (its first request after a reset or an eviction): its
  // history read from storage, and the chat's rows read to rebuild what it may have missed.
  instanceStart: { keysRead: before.counts.keysRead, rowReads: before.counts.rowReads, rowsReturned: before.counts.rowsReturned },
  feedAwakeWithTabsMs: after.meter.awakeMs - before.meter.awakeMs,
  runMs: Math.round(runMs),
};
// What the tabs' waiting cost, measured (the object sleeps between events: it was 460.8, the
// whole hour, when it answered the tabs' SSE itself).
report.gbSecondsPerHourWithATab = +((OBJECT_GB * report.feedAwakeWithTabsMs) / 1000 * (3_600_000 / report.runMs)).toFixed(3);
report.gbSecondsPerTurnWithoutTabs = +((OBJECT_GB * report.perTurn.feedWithoutTabs.awakeMs) / 1000).toFixed(4);

if (args.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
else {
  const l = report.latencyMs;
  log(`feed latency over ${TURNS} turns × ${TABS} tabs (ms): open → start p50 ${l.openToStart.p50} p99 ${l.openToStart.p99}; open answered → start p50 ${l.answeredToStart.p50} p99 ${l.answeredToStart.p99}; close → end p50 ${l.closeToEnd.p50} p99 ${l.closeToEnd.p99}`);
  log(`per turn, the feed object: ${JSON.stringify(report.perTurn.feed)}`);
  log(`per turn, no tab connected: ${JSON.stringify(report.perTurn.feedWithoutTabs)} → ${report.gbSecondsPerTurnWithoutTabs} GB-s`);
  log(`per turn, the stream object's extra: ${JSON.stringify(report.perTurn.streamObject)}`);
  log(`waking the feed object: ${JSON.stringify(report.instanceStart)}`);
  log(`awake while tabs were connected: ${report.feedAwakeWithTabsMs} ms of a ${report.runMs} ms run (at this rate of turns, ${report.gbSecondsPerHourWithATab} GB-s an hour)`);
}
if (!args['no-save']) {
  const dir = join(ROOT, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${report.date}-${report.commit}-feed.json`);
  writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
  log(`saved ${file}`);
}
