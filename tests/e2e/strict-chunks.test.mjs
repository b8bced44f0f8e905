// Strict validation of `ui` streams (issue 38, SPEC §9): a line the AI SDK's own chunk schema
// refuses is refused here, 400 `bad_chunk` with `field` naming what is wrong, and nothing of it
// is written. One test per case, in the style of bad-input.test.mjs: D1 (both tables) is
// snapshotted before and after each case, after a flush that would commit anything pushed by
// mistake, and the live stream's seq/durableSeq are unchanged. Then: a line split across
// appends is judged whole; UI_VALIDATION=lenient accepts what strict refuses; a bad
// UI_VALIDATION or ALLOWED_ORIGINS refuses every request with a message naming it.
import test from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, startStack } from './harness.mjs';
import { api, call, d1Snapshot, isError, isLoggedError, newStream, ok } from './util.mjs';

let stack;
let c; // one open `ui` stream every case appends to
const line = (chunk) => `${JSON.stringify(chunk)}\n`;
const START = line({ type: 'start', messageId: 'm' });

test.before(async () => {
  stack = await startStack({ name: 'e2e-strict-chunks', vars: { CHECKPOINT_INTERVAL_MS: '50' } });
  c = api(stack, newStream(stack, 'strict'));
  ok(await c.open(undefined, 'ui'), 'open');
  ok(await c.append(START), 'a first line');
  ok(await c.flush(), 'flush');
});
test.after(() => stack?.stop());

const pm = (v) => ({ type: 'text-start', id: 't', providerMetadata: v });
const CASES = [
  ['text-delta without delta', { type: 'text-delta', id: 't' }, 'delta'],
  ['text-delta whose delta is a number', { type: 'text-delta', id: 't', delta: 7 }, 'delta'],
  ['text-start without id', { type: 'text-start' }, 'id'],
  ['text-end whose id is null', { type: 'text-end', id: null }, 'id'],
  ['reasoning-delta without delta', { type: 'reasoning-delta', id: 'r' }, 'delta'],
  ['start whose messageId is null', { type: 'start', messageId: null }, 'messageId'],
  ['finish with an unknown finishReason', { type: 'finish', finishReason: 'done' }, 'finishReason'],
  ['error without errorText', { type: 'error' }, 'errorText'],
  ['abort whose reason is a number', { type: 'abort', reason: 1 }, 'reason'],
  ['tool-input-start without toolName', { type: 'tool-input-start', toolCallId: 'c' }, 'toolName'],
  ['tool-input-delta without inputTextDelta', { type: 'tool-input-delta', toolCallId: 'c' }, 'inputTextDelta'],
  ['tool-input-available without input', { type: 'tool-input-available', toolCallId: 'c', toolName: 'w' }, 'input'],
  ['tool-input-start with inputEncoding "xml"', { type: 'tool-input-start', toolCallId: 'c', toolName: 'w', inputEncoding: 'xml' }, 'inputEncoding'],
  ['tool-output-available without output', { type: 'tool-output-available', toolCallId: 'c' }, 'output'],
  ['tool-output-error whose errorText is an object', { type: 'tool-output-error', toolCallId: 'c', errorText: {} }, 'errorText'],
  ['tool-approval-response whose approved is "yes"', { type: 'tool-approval-response', approvalId: 'a', approved: 'yes' }, 'approved'],
  ['source-url without url', { type: 'source-url', sourceId: 's' }, 'url'],
  ['source-document without title', { type: 'source-document', sourceId: 's', mediaType: 'application/pdf' }, 'title'],
  ['file without mediaType', { type: 'file', url: 'https://x/y.png' }, 'mediaType'],
  ['reasoning-file whose url is a number', { type: 'reasoning-file', url: 1, mediaType: 'image/png' }, 'url'],
  ['custom without kind', { type: 'custom' }, 'kind'],
  ['message-metadata without messageMetadata', { type: 'message-metadata' }, 'messageMetadata'],
  ['steering-message whose part has no text', { type: 'steering-message', id: 's', parts: [{ type: 'text' }] }, 'parts[0].text'],
  ['data-weather without data', { type: 'data-weather', id: 'w' }, 'data'],
  ['data-weather whose transient is "no"', { type: 'data-weather', data: 1, transient: 'no' }, 'transient'],
  ['providerMetadata that is an array', pm([]), 'providerMetadata'],
  ['providerMetadata whose provider entry is a string', pm({ openai: 'x' }), 'providerMetadata.openai'],
  ['a citation with a negative startIndex', { type: 'text-end', id: 't', citations: [{ source: { type: 'source', sourceType: 'url', id: '1', url: 'u' }, startIndex: -1 }] }, 'citations[0].startIndex'],
  ['text-end without id', { type: 'text-end' }, 'id'],
  ['reasoning-start without id', { type: 'reasoning-start' }, 'id'],
  ['reasoning-end without id', { type: 'reasoning-end' }, 'id'],
  ['tool-input-error without errorText', { type: 'tool-input-error', toolCallId: 'c', toolName: 'w', input: {} }, 'errorText'],
  ['tool-approval-request without approvalId', { type: 'tool-approval-request', toolCallId: 'c' }, 'approvalId'],
  ['tool-approval-response without approved', { type: 'tool-approval-response', approvalId: 'a' }, 'approved'],
  ['tool-output-error without toolCallId', { type: 'tool-output-error', errorText: 'e' }, 'toolCallId'],
  ['tool-output-denied without toolCallId', { type: 'tool-output-denied' }, 'toolCallId'],
  ['reasoning-file without mediaType', { type: 'reasoning-file', url: 'https://x/y.png' }, 'mediaType'],
  ['steering-message without parts', { type: 'steering-message', id: 's' }, 'parts'],
  ['an unknown type "text"', { type: 'text', text: 'hi' }, 'type'],
  ['a type with a typo "text_delta"', { type: 'text_delta', id: 't', delta: 'x' }, 'type'],
  ['the last of two "delta" keys wrong (JSON.parse keeps the last)', '{"type":"text-delta","id":"t","delta":"ok","delta":false}', 'delta'],
];

const liveState = async () => {
  const s = ok(await c.stats(), 'stats');
  return { seq: s.seq, durableSeq: s.durableSeq };
};

for (const [name, chunk, field] of CASES) {
  test(`strict: ${name} → 400 bad_chunk naming ${field}, nothing written`, async () => {
    const before = d1Snapshot(stack.db);
    const liveBefore = await liveState();
    const res = await c.append(typeof chunk === 'string' ? `${chunk}\n` : line(chunk));
    const body = isError(res, 400, 'bad_chunk', name);
    assert.equal(body.field, field, `the field: ${body.message}`);
    assert.equal(body.offset, liveBefore.seq, 'the offset where the refused line starts');
    assert.ok(body.message.includes(field === 'type' ? 'type' : `"${field}"`), `the message names it: ${body.message}`);
    ok(await c.flush(), 'flush'); // commits anything pushed by mistake, so D1 would show it
    assert.deepEqual(await liveState(), liveBefore, 'the live stream changed');
    assert.deepEqual(d1Snapshot(stack.db), before, 'D1 changed');
  });
}

test('strict battery summary: at least 20 cases; every known chunk type with a required field has a case missing one, and an unknown type has one', () => {
  assert.ok(CASES.length >= 20, `${CASES.length} cases`);
  // The known types and their required fields: the strict table the Worker validates with (derived from the installed ai).
  const table = JSON.parse(readFileSync(join(ROOT, 'src/engine/wire/ui_chunks.json'), 'utf8')).types;
  const required = (fields) => Object.entries(fields).filter(([, t]) => !(typeof t === 'object' && 'optional' in t)).map(([f]) => f);
  const missingOne = (type) =>
    CASES.some(([, chunk, field]) => typeof chunk === 'object' && chunk.type === type && required(table[type]).includes(field) && !(field in chunk));
  const uncovered = Object.keys(table).filter((type) => required(table[type]).length > 0 && !missingOne(type));
  assert.deepEqual(uncovered, [], 'known types without a missing-field case');
  assert.ok(CASES.some(([, chunk]) => typeof chunk === 'object' && chunk.type.startsWith('data-') && !('data' in chunk)), 'data-* without data');
  assert.ok(CASES.some(([, chunk, field]) => field === 'type' && typeof chunk === 'object' && !(chunk.type in table)), 'an unknown type');
});

test('strict: a line split across appends is judged whole: the fragment waits, the bad line and what follows it are refused', async () => {
  const before = d1Snapshot(stack.db);
  const liveBefore = await liveState();
  ok(await c.append('{"type":"text-delta","id":"t"'), 'an unfinished line waits');
  const res = await c.append(`,"delta":3}\n${line({ type: 'text-delta', id: 't', delta: 'never' })}`);
  assert.equal(isError(res, 400, 'bad_chunk').field, 'delta');
  ok(await c.flush(), 'flush');
  assert.deepEqual(await liveState(), liveBefore);
  assert.deepEqual(d1Snapshot(stack.db), before);
  ok(await c.append(line({ type: 'text-start', id: 't' })), 'the next line starts fresh and is accepted');
});

test('UI_VALIDATION=lenient accepts what strict refuses (any JSON object with a string type); the line rules still hold', { timeout: 120_000 }, async (t) => {
  const lenient = await startStack({ name: 'e2e-lenient', vars: { UI_VALIDATION: 'lenient' } });
  t.after(() => lenient.stop());
  const l = api(lenient, newStream(lenient, 'lenient'));
  ok(await l.open(undefined, 'ui'), 'open');
  for (const [name, chunk] of CASES) ok(await l.append(typeof chunk === 'string' ? `${chunk}\n` : line(chunk)), `lenient: ${name}`);
  assert.equal(isError(await l.append('{"type":7}\n'), 400, 'bad_chunk').field, 'type', 'a type that is not a string is still refused');
  assert.equal(isError(await l.append('[]\n'), 400, 'bad_chunk').field, undefined, 'not an object: no field to name');
});

test('a bad UI_VALIDATION or ALLOWED_ORIGINS refuses every request with 500 misconfigured, naming it in the log', { timeout: 120_000 }, async (t) => {
  for (const [name, value, says] of [
    ['UI_VALIDATION', 'loose', '"strict" or "lenient"'],
    ['ALLOWED_ORIGINS', 'https://app.example.com/', 'has a path'],
    ['ALLOWED_ORIGINS', '*', 'list the origins'],
  ]) {
    const bad = await startStack({ name: 'e2e-misconfigured', vars: { [name]: value } });
    try {
      const id = newStream(bad, 'mis');
      for (const res of [await api(bad, id).open(), await call(`${bad.baseUrl}/streams/${id}/ui?token=${bad.token(id, 'read')}`)]) {
        await isLoggedError(bad, res, 500, 'misconfigured', [name, says], `${name}=${value}`);
      }
    } finally {
      await bad.stop();
    }
  }
  t.diagnostic('each bad setting refused on every route, named in the log');
});
