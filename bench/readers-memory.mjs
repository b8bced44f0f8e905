#!/usr/bin/env node
// What readers cost a stream's object in memory: one stream holding TEXT bytes of text, then
// N readers joining it at 0 (each is replayed the whole text), all kept attached. Reported: the
// workerd process's resident memory and the wasm heap in use (`/stats`' `wasmHeap`, the dev
// build's counting allocator) before and after, and per reader. The figures behind MAX_READERS
// and MAX_STREAM_BYTES (docs/PERFORMANCE.md, "Hostile traffic").
//
//   node bench/readers-memory.mjs [--readers 200] [--text-bytes 0] [--text ascii|control]
//                                 [--max-stream-bytes N] [--together]
//
// `--together`: the readers join at once (a burst), each waiting for its replay only after all
// have asked; by default each joins once the one before it has its replay.
//
// `--text control`: U+0001 characters, which JSON writes as 6 bytes each (`\u0001`): the text
// whose encoding is largest, 6× the text.
//
// A bare stack (bench/bare-serve.mjs: workerd without wrangler's dev proxy, whose per-connection
// relay would be counted too), the dev build (for the heap counter).
import http from 'node:http';
import { parseArgs } from 'node:util';
import { startStack } from '../tests/e2e/harness.mjs';
import { workerdUsage } from './bench.mjs';
import { connectInspector } from './inspector.mjs';

const { values } = parseArgs({
  options: {
    readers: { type: 'string', default: '200' },
    'text-bytes': { type: 'string', default: '0' },
    'max-stream-bytes': { type: 'string' },
    text: { type: 'string', default: 'ascii' },
    together: { type: 'boolean', default: false },
  },
});
const readers = Number(values.readers);
const textBytes = Number(values['text-bytes']);

/** Attaches a reader at 0 and resolves once its replay has arrived whole (`bytes` of the wire,
 * at least); it stays attached. */
function attach(url, bytes) {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent: false, headers: { accept: 'text/event-stream' } }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        return reject(new Error(`reader: ${res.statusCode}`));
      }
      let got = 0;
      let resolved = false;
      res.on('data', (chunk) => {
        got += chunk.length;
        if (!resolved && got >= bytes) {
          resolved = true;
          resolve(req);
        }
      });
      res.on('error', () => {});
    });
    req.on('error', reject);
  });
}

const stack = await startStack({
  name: 'bench-readers-memory',
  bare: true,
  vars: { MAX_READERS: String(readers + 10), ...(values['max-stream-bytes'] ? { MAX_STREAM_BYTES: values['max-stream-bytes'] } : {}) },
});
const conns = [];
try {
  const id = `rm-${process.pid}`;
  stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES (?, 'bench', 'assistant')`, id);
  const auth = { authorization: `Bearer ${stack.token(id)}` };
  const url = (action) => `${stack.baseUrl}/streams/${id}/${action}`;
  const opened = await fetch(url('open'), { method: 'POST', headers: auth });
  if (opened.status !== 200) throw new Error(`open: ${opened.status} ${await opened.text()}`);
  const piece = (values.text === 'control' ? '\u0001' : 'a').repeat(512 * 1024);
  for (let sent = 0; sent < textBytes; sent += piece.length) {
    const res = await fetch(url('append'), { method: 'POST', headers: auth, body: piece.slice(0, Math.min(piece.length, textBytes - sent)) });
    if (res.status !== 200) throw new Error(`append: ${res.status} ${await res.text()}`);
  }
  const stats = async () => (await (await fetch(url('stats'), { headers: auth })).json());
  const pid = stack.process.pgid;
  // The isolate's own memory, what its 128 MB limit counts: the JavaScript heap and the
  // ArrayBuffers' backing stores (V8's Runtime.getHeapUsage), and the wasm instance's memory.
  const inspector = await connectInspector(stack.inspectorPort);
  const isolate = async ({ gc = false } = {}) => {
    if (gc) await inspector.send('HeapProfiler.collectGarbage');
    const h = await inspector.send('Runtime.getHeapUsage');
    const wasm = (await stats()).wasmHeap.memoryBytes;
    return Math.round((h.usedSize + (h.backingStorageSize ?? 0) + wasm) / 1024);
  };
  const isolateBeforeKb = await isolate({ gc: true });
  let isolatePeakKb = isolateBeforeKb;
  const before = { ...workerdUsage(pid), heap: (await stats()).wasmHeap };
  const readUrl = `${url('events')}?from=0&token=${stack.token(id, 'read')}`;
  const wireBytes = values.text === 'control' ? 6 * textBytes : textBytes;
  const peak = { rssKb: 0 };
  if (values.together) {
    const joining = Array.from({ length: readers }, () => attach(readUrl, wireBytes));
    const sampling = (async () => {
      for (let done = false; !done; ) {
        done = await Promise.race([Promise.all(joining).then(() => true), new Promise((r) => setImmediate(() => r(false)))]);
        peak.rssKb = Math.max(peak.rssKb, workerdUsage(pid).rssKb);
        isolatePeakKb = Math.max(isolatePeakKb, await isolate());
      }
    })();
    conns.push(...(await Promise.all(joining)));
    await sampling;
  } else {
    for (let i = 0; i < readers; i++) {
      conns.push(await attach(readUrl, wireBytes));
      peak.rssKb = Math.max(peak.rssKb, workerdUsage(pid).rssKb);
      isolatePeakKb = Math.max(isolatePeakKb, await isolate());
    }
  }
  const isolateAfterKb = await isolate({ gc: true });
  inspector.close();
  const after = { ...workerdUsage(pid), heap: (await stats()).wasmHeap };
  const st = await stats();
  if (st.readers !== readers) throw new Error(`${st.readers} readers attached, ${readers} expected`);
  const kb = (b) => Math.round(b / 1024);
  const row = {
    readers,
    textBytes,
    attached: st.readers,
    rssBeforeKb: before.rssKb,
    rssAfterKb: after.rssKb,
    rssPeakKb: Math.max(peak.rssKb, after.rssKb),
    isolateBeforeKb,
    isolatePeakKb,
    isolateAfterKb,
    text: values.text,
    together: values.together,
    rssPerReaderKb: Math.round(((after.rssKb - before.rssKb) / readers) * 10) / 10,
    heapBeforeKb: kb(before.heap.inUseBytes),
    heapAfterKb: kb(after.heap.inUseBytes),
    wasmMemoryAfterKb: kb(after.heap.memoryBytes),
    heapPerReaderKb: Math.round(((after.heap.inUseBytes - before.heap.inUseBytes) / 1024 / readers) * 10) / 10,
  };
  console.log(JSON.stringify(row));
} finally {
  for (const c of conns) c.destroy();
  await stack.stop();
}
