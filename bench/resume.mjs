// The time from a restart to the first resumed delta at a reader (SPEC §10), against the real
// local runtime: an answer is checkpointed in part and has a live tail, the runtime is killed
// (SIGKILL of its process group) and restarted; from the moment it answers again, a reader
// reconnects at the offset it held (past the durable text: parked) while the producer resumes
// and re-sends; the clock stops at the reader's first chunk. One sample per restart.
//
//   scripts/build.sh --dev && node bench/resume.mjs [samples=10]
import { startStack, readSse } from '../tests/e2e/harness.mjs';
import { api, newStream, ok, percentile } from '../tests/e2e/util.mjs';

const samples = Number(process.argv[2] ?? 10);
const stack = await startStack({ name: 'bench-resume', vars: { RESUME_WINDOW_MS: '30000' } });
const times = [];
try {
  for (let i = 0; i < samples; i++) {
    const c = api(stack, newStream(stack, 'resume'));
    const durable = 'd'.repeat(100);
    const tail = 'l'.repeat(20);
    ok(await c.open());
    ok(await c.append(durable));
    ok(await c.flush());
    ok(await c.append(tail));
    await stack.kill();
    await stack.restart();
    const started = performance.now();
    const reader = readSse(c.eventsUrl(durable.length + tail.length));
    // The producer resumes with the epoch its open gave it (1), as the recipe says.
    const grant = ok(await fetch(c.url('resume'), { method: 'POST', headers: { authorization: `Bearer ${c.token}`, 'x-rindle-epoch': '1' } }).then(async (r) => ({ status: r.status, json: await r.json() })));
    const headers = { authorization: `Bearer ${c.token}`, 'x-rindle-epoch': String(grant.epoch), 'content-type': 'text/plain; charset=utf-8' };
    const produced = durable + tail + 'more';
    ok(await fetch(c.url('append'), { method: 'POST', headers, body: produced.slice(grant.seq) }).then(async (r) => ({ status: r.status, json: await r.json() })));
    const sse = await reader;
    await sse.next((f) => f.json?.type === 'chunk', 30_000);
    times.push(performance.now() - started);
    sse.close();
    await fetch(c.url('close'), { method: 'POST', headers });
  }
} finally {
  await stack.stop();
}
times.sort((a, b) => a - b);
const ms = (p) => percentile(times, p).toFixed(0);
console.log(`restart → first resumed delta at a reader, ${times.length} restarts: p50 ${ms(50)} ms, p99 ${ms(99)} ms (min ${times[0].toFixed(0)}, max ${times.at(-1).toFixed(0)})`);
