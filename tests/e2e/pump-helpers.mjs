// Helpers the pump suites share (pump.test.mjs, pump-background.test.mjs).
import assert from 'node:assert/strict';
import { api, call, newStream, ok } from './util.mjs';

/** POST /pump with a JSON body (or a raw string); returns call()'s { status, raw, json }. */
export function pump(s, body, token = s.token) {
  return call(s.url('pump'), {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

/** A fresh, open stream on `stack` with a reader attached from 0 before anything is pumped. */
export async function openWithReader(stack, prefix) {
  const id = newStream(stack, prefix);
  const s = api(stack, id);
  ok(await s.open(), 'open');
  const reader = await s.events(0);
  assert.equal(reader.status, 200, 'events');
  await reader.next((f) => f.json?.type === 'open');
  return { id, s, reader };
}

/** The pump was accepted: 202 `{streamId, pumping: true, epoch}`, the epoch the pump holds as the
 * stream's producer (above the caller's: the caller is fenced while the pump runs). */
export function accepted(res, id) {
  assert.equal(res.status, 202, `pump: ${res.status} ${res.raw}`);
  const { epoch, ...rest } = res.json;
  assert.deepEqual(rest, { streamId: id, pumping: true });
  assert.ok(Number.isInteger(epoch) && epoch >= 2, `the pump's epoch: ${epoch}`);
  return epoch;
}
