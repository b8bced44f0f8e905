// Pure parts of the shipped JavaScript (public/chat-transport.js, public/producer.js), natively
// in Node: the transport's SSE parser on arbitrarily split input, the NDJSON encoding of UI
// chunks, and the WebCrypto tokens (checked by the tooling's node:crypto verifier).
import test from 'node:test';
import assert from 'node:assert/strict';
import { createSseParser } from '../../public/chat-transport.js';
import { BadChunkError, encodeUIChunk, signStreamToken } from '../../public/producer.js';
import { decodeToken, verifyToken } from '../../scripts/jwt.mjs';
import { rng, seedFromEnv } from '../e2e/util.mjs';

const SSE = [
  'retry: 100\n\n',
  ': ping\n\n',
  'id: 12\ndata: {"type":"text-delta","id":"t","delta":"東京 👍🏽"}\n\n',
  'id: 30\r\ndata: {"type":"text-end","id":"t"}\r\n\r\n',
  'id: 41\rdata: {"type":"finish"}\r\r',
  'data: multi\ndata: line\n\n',
  'data: [DONE]\n\n',
];
const EVENTS = [
  { id: undefined, data: undefined, retry: 100 },
  { id: '12', data: '{"type":"text-delta","id":"t","delta":"東京 👍🏽"}', retry: undefined },
  { id: '30', data: '{"type":"text-end","id":"t"}', retry: undefined },
  { id: '41', data: '{"type":"finish"}', retry: undefined },
  { id: undefined, data: 'multi\nline', retry: undefined },
  { id: undefined, data: '[DONE]', retry: undefined },
];

test('the SSE parser yields the same events however the body is split (LF, CRLF, CR; comments skipped)', () => {
  const seed = seedFromEnv();
  const r = rng(seed);
  const body = SSE.join('');
  for (let round = 0; round < 200; round++) {
    const events = [];
    const parser = createSseParser((e) => events.push(e));
    for (let i = 0; i < body.length; ) {
      const n = round === 0 ? 1 : r.int(1, 12);
      parser.push(body.slice(i, i + n));
      i += n;
    }
    assert.deepEqual(events, EVENTS, `seed ${seed}, round ${round}`);
  }
});

test('reset() drops a half-received event (its connection died)', () => {
  const events = [];
  const parser = createSseParser((e) => events.push(e));
  parser.push('id: 5\ndata: {"type":"start"}\n');
  parser.reset();
  parser.push('id: 9\ndata: {"type":"finish"}\n\n');
  assert.deepEqual(events, [{ id: '9', data: '{"type":"finish"}', retry: undefined }]);
});

test('encodeUIChunk: one JSON line per chunk; anything that is not an object with a string type is refused', () => {
  assert.equal(encodeUIChunk({ type: 'text-delta', id: 't', delta: 'a\nb\r\u2028👍🏽' }), '{"type":"text-delta","id":"t","delta":"a\\nb\\r\u2028👍🏽"}\n');
  for (const bad of [null, 'text', 42, ['type'], {}, { type: 7 }, { type: null }]) {
    assert.throws(() => encodeUIChunk(bad), BadChunkError, JSON.stringify(bad));
  }
});

test('signStreamToken: an HS256 token the tooling verifies, with the claims asked for', async () => {
  const secret = 'unit-test-secret-0123456789';
  const now = Date.now();
  const token = await signStreamToken({ secret, stream: 'a-1', scope: ['read', 'cancel'], ttlSeconds: 60, now });
  const payload = verifyToken(token, secret);
  assert.deepEqual(payload, { sub: 'app', stream: 'a-1', scope: 'read cancel', exp: Math.floor(now / 1000) + 60 });
  assert.deepEqual(decodeToken(token).header, { alg: 'HS256', typ: 'JWT' });
  assert.throws(() => verifyToken(token, 'another-secret-0123456789'), /bad signature/);
  await assert.rejects(signStreamToken({ secret: 'short', stream: 'a', scope: 'read' }), /at least 16/);
});

test('the shipped .d.ts files type-check against the real ai types (tsc --strict on tests/ai/types/usage.ts)', async () => {
  // usage.ts uses the transport, the producer helpers and client.js as the README does, and
  // holds @ts-expect-error lines that fail the check if a type lets a mistake through (any).
  const { execFile } = await import('node:child_process');
  const { fileURLToPath } = await import('node:url');
  const tsc = fileURLToPath(new URL('../../node_modules/typescript/bin/tsc', import.meta.url));
  const project = fileURLToPath(new URL('./types/tsconfig.json', import.meta.url));
  const { code, output } = await new Promise((resolve) => {
    execFile(process.execPath, [tsc, '-p', project], (err, stdout, stderr) => resolve({ code: err ? err.code : 0, output: stdout + stderr }));
  });
  assert.equal(code, 0, `tsc found type errors:\n${output}`);
});
