// bench/instructions.mjs counts the instructions of the Worker's workerd under valgrind's
// callgrind (BENCHMARKS.md, "Instructions per delivery"). Checked here against real workerd
// under the same wrapper: the count of a window follows the work done in it, and the dump's
// self costs add up to its total (a call's inclusive cost is not counted as its caller's own).
// No figure of rindle-streams is judged here; the meter is.
import test from 'node:test';
import assert from 'node:assert/strict';
import { counted, readDump, serveUnderCallgrind, split } from '../../bench/instructions.mjs';

// Work of a known size per request: `n` turns of a loop the JIT cannot drop (its sum is answered).
const WORKER = `export default { async fetch(req) {
  const n = Number(new URL(req.url).searchParams.get('n') ?? 0);
  let x = 0;
  for (let i = 0; i < n; i++) x = (x * 31 + i) | 0;
  return new Response(String(x));
} };`;

test('instructions.mjs: callgrind\'s count of a window follows the work in it, and its self costs add up to its total', { timeout: 180_000 }, async (t) => {
  const workerd = await serveUnderCallgrind(WORKER);
  t.after(() => workerd.stop());
  const get = async (n) => (await fetch(`${workerd.url}/?n=${n}`)).text();
  const window = async (n, requests) => {
    const meter = counted();
    await meter.during.start(workerd.pid);
    for (let i = 0; i < requests; i++) await get(n);
    await meter.during.stop();
    return meter.dump;
  };
  await window(100_000, 5); // the loop compiled, as the measured windows are warmed up
  const light = await window(0, 20);
  const heavy = await window(100_000, 20);
  t.diagnostic(`20 requests: ${light.total} instructions with no loop, ${heavy.total} with 100,000 turns each`);
  assert.ok(light.total > 0, 'a window of requests is counted');
  // 2,000,000 turns of at least a few instructions each, on top of the same requests.
  assert.ok(heavy.total - light.total > 2 * 2_000_000, `the loop's turns are counted: ${heavy.total} - ${light.total}`);
  for (const dump of [light, heavy]) {
    const selfSum = [...dump.byFunction.values()].reduce((a, b) => a + b, 0);
    assert.equal(selfSum, dump.total, 'the self costs by function add up to the total');
    assert.equal([...dump.byObject.values()].reduce((a, b) => a + b, 0), dump.total, 'and by object file');
  }
});

test('instructions.mjs: a dump with simulated caches gives every event\'s total, and self instructions from its first column', () => {
  // The format callgrind writes (names compressed to `(n)` after their first use, a call's
  // inclusive cost on the line after `calls=`), with --cache-sim's events.
  const dump = readDump(['version: 1', 'events: Ir Dr Dw I1mr D1mr', 'ob=(1) /usr/bin/workerd', 'fn=(1) main', '0 10 2 3 1 0',
    'cfn=(2) helper', 'calls=4 0', '0 100 5 5 5 5', 'fn=(2)', '0 100 5 5 5 5', 'ob=(2) ???', 'fn=(3) 0x1234', '0 7 1 0 0 0', 'totals: 117 8 8 6 5', ''].join('\n'));
  assert.equal(dump.total, 117);
  assert.deepEqual(Object.fromEntries(dump.events), { Ir: 117, Dr: 8, Dw: 8, I1mr: 6, D1mr: 5 });
  assert.deepEqual(Object.fromEntries(dump.byFunction), { main: 10, helper: 100, '0x1234': 7 });
  assert.deepEqual(Object.fromEntries(dump.byObject), { workerd: 110, '???': 7 });
});

test('instructions.mjs: split puts each function\'s instructions in one part, a compiler\'s "Marking" pass among the compilers', () => {
  const byFunction = new Map([
    ['cppgc::internal::Sweeper::SweeperImpl::PerformSweepOnMutatorThread()', 40],
    ['v8::internal::maglev::AnyUseMarkingProcessor::Process()', 30],
    ['v8::internal::compiler::turboshaft::Assembler::Emit()', 20],
    ['workerd::jsg::Wrappable::detachWrapper(bool)', 10],
  ]);
  assert.deepEqual(split(byFunction), { compiler: 50, collector: 40, steady: 10 });
});
