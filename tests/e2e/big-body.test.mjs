// D1 limits (SPEC §5): a body too large to compact into one row (over ~1.9 MB) is never
// lost: its checkpoints stay as chunk rows (each under D1's 2,000,000-byte row limit), the row
// is sealed, and /text returns the whole text.
import test from 'node:test';
import assert from 'node:assert/strict';
import { startStack } from './harness.mjs';
import { api, call, newStream, ok, rows } from './util.mjs';

let stack;

test.before(async () => {
  stack = await startStack({ name: 'e2e-big-body' });
});
test.after(async () => {
  await stack?.stop();
});

test('a 2.4 MB body is sealed in place: chunk rows under the row limit, /text whole', { timeout: 120_000 }, async () => {
  const id = newStream(stack, 'big');
  const s = api(stack, id);
  ok(await s.open(), 'open');
  // Three appends of 800 KB (under MAX_APPEND_BYTES), mixing 1-, 2-, 3- and 4-byte characters.
  const unit = 'a€ß😀日本語 '.repeat(4000);
  const pieces = [];
  while (pieces.join('').length < 2_400_000 / 2) pieces.push(unit);
  const produced = pieces.join('');
  const bytes = Buffer.byteLength(produced);
  assert.ok(bytes > 1_900_000, `${bytes} bytes`);
  for (let at = 0; at < produced.length;) {
    let end = Math.min(produced.length, at + 300_000);
    if (end < produced.length && /[\udc00-\udfff]/.test(produced[end])) end += 1; // not inside a surrogate pair
    ok(await s.append(produced.slice(at, end)), 'append');
    at = end;
  }
  const closed = ok(await s.close(), 'close');
  assert.deepEqual({ status: closed.status, seq: closed.seq, durableSeq: closed.durableSeq }, { status: 'complete', seq: produced.length, durableSeq: produced.length });
  const { row, chunks } = rows(stack, id);
  assert.equal(row.status, 'complete');
  assert.equal(row.seq, produced.length);
  assert.ok(chunks.length >= 8, `${chunks.length} chunk rows hold the text`);
  for (const c of chunks) assert.ok(Buffer.byteLength(c.text) < 1_000_000, `a chunk row of ${Buffer.byteLength(c.text)} bytes`);
  const text = await call(`${stack.baseUrl}/streams/${id}/text?token=${encodeURIComponent(s.readToken)}`);
  assert.equal(text.status, 200);
  assert.equal(text.json.status, 'complete');
  assert.equal(text.json.seq, produced.length);
  assert.ok(text.json.text === produced, 'the durable text is the produced text, whole');
});
