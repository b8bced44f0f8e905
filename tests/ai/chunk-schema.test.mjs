// Strict validation is the AI SDK's own (issue 38): the table the Worker checks `ui` lines with
// (src/engine/wire/ui_chunks.json) is derived from the installed `ai` package's zod schema
// (`uiMessageChunkSchema`), and this file keeps the two from drifting:
//   1. the table equals what scripts/ui-chunk-schema.mjs derives from node_modules/ai now (an
//      upgrade of `ai` that changes the schema fails here until the table is regenerated);
//   2. the real Worker's verdict equals the SDK's own `validate` on a corpus built from the
//      table: every chunk type with all its fields, with each required field missing, with each
//      field of a wrong type (nested ones too), and types the SDK does not have.
import test from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { uiMessageChunkSchema } from 'ai';
import { TABLE_FILE, deriveChunkTable } from '../../scripts/ui-chunk-schema.mjs';
import { startStack } from '../e2e/harness.mjs';
import { api, newStream, ok } from '../e2e/util.mjs';

test('the strict table (src/engine/wire/ui_chunks.json) is the installed ai package\'s uiMessageChunkSchema', async () => {
  const derived = await deriveChunkTable();
  const table = JSON.parse(readFileSync(TABLE_FILE, 'utf8'));
  assert.deepEqual(table, derived, 'run `node scripts/ui-chunk-schema.mjs` to regenerate the table from node_modules/ai');
  assert.ok(Object.keys(table.types).length >= 25, `${Object.keys(table.types).length} chunk types`);
  assert.deepEqual(Object.keys(table.typePrefixes), ['data-']);
});

// ---- a corpus from the table

/** A value of type `t` (every optional field included). */
function sample(t) {
  if (typeof t === 'string') return { string: 'x 👍🏽', boolean: true, number: 1.5, unknown: { any: [1, null] }, json: { a: [1, 'b', null] } }[t];
  if ('literal' in t) return t.literal;
  if ('enum' in t) return t.enum[0];
  if ('optional' in t) return sample(t.optional);
  if ('record' in t) return { key: sample(t.record) };
  if ('array' in t) return [sample(t.array)];
  if ('object' in t) return Object.fromEntries(Object.entries(t.object).map(([k, v]) => [k, sample(v)]));
  if ('union' in t) return sample(t.union[0]);
  if ('number' in t) return t.number.min ?? 3;
  throw new Error(`no sample for ${JSON.stringify(t)}`);
}

/** Values of type `t` that are wrong, each with where the fault is (`''`: the value itself). */
function wrongs(t, depth = 0) {
  if (depth > 3) return [];
  const at = (path, value) => ({ path, value });
  if (typeof t === 'string') {
    return { string: [at('', 7), at('', null)], boolean: [at('', 'yes')], number: [at('', '1')], unknown: [], json: [] }[t];
  }
  if ('literal' in t || 'enum' in t) return [at('', 'not-one-of-them'), at('', 1)];
  if ('optional' in t) return wrongs(t.optional, depth);
  if ('number' in t) return [at('', 'a'), ...(t.number.integer ? [at('', 1.5)] : []), ...(t.number.min !== undefined ? [at('', t.number.min - 1)] : [])];
  if ('record' in t) return [at('', []), at('', 1), ...wrongs(t.record, depth + 1).map((w) => at(`key${w.path && w.path[0] !== '[' ? '.' : ''}${w.path}`, { key: w.value }))];
  if ('array' in t) return [at('', {}), ...wrongs(t.array, depth + 1).map((w) => at(`[0]${w.path && w.path[0] !== '[' ? '.' : ''}${w.path}`, [w.value]))];
  if ('object' in t) return [at('', 'x'), ...fieldWrongs(t.object, depth + 1)];
  if ('union' in t) return [at('', 1)];
  throw new Error(`no wrongs for ${JSON.stringify(t)}`);
}

/** An object of `fields` with one field missing or wrong, for each way it can be. */
function fieldWrongs(fields, depth) {
  const whole = Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, sample(v)]));
  const out = [];
  for (const [name, t] of Object.entries(fields)) {
    if (!(typeof t === 'object' && 'optional' in t)) {
      const { [name]: _gone, ...rest } = whole;
      out.push({ path: name, value: rest });
    }
    for (const w of wrongs(t, depth)) {
      out.push({ path: w.path ? `${name}${w.path[0] === '[' ? '' : '.'}${w.path}` : name, value: { ...whole, [name]: w.value } });
    }
  }
  return out;
}

/** Every case: a chunk, and where its fault is (undefined: none). */
function corpus(table) {
  const cases = [];
  const byType = { ...table.types, ...Object.fromEntries(Object.entries(table.typePrefixes).map(([p, f]) => [`${p}weather`, f])) };
  for (const [type, fields] of Object.entries(byType)) {
    const whole = { type, ...sample({ object: fields }) };
    cases.push({ name: `${type}: every field`, chunk: whole });
    const required = Object.fromEntries(Object.entries(fields).filter(([, t]) => !(typeof t === 'object' && 'optional' in t)));
    cases.push({ name: `${type}: the required fields only`, chunk: { type, ...sample({ object: required }) } });
    for (const w of fieldWrongs(fields, 1)) cases.push({ name: `${type}: ${w.path}`, chunk: { type, ...w.value }, field: w.path });
  }
  for (const type of ['text', 'text_delta', 'Text-Delta', 'tool-call', 'datax', '']) cases.push({ name: `unknown type ${JSON.stringify(type)}`, chunk: { type }, field: 'type' });
  return cases;
}

test('the Worker\'s strict validation gives the SDK\'s own verdict on every chunk type, field by field (real ai validate, real runtime)', { timeout: 300_000 }, async (t) => {
  const stack = await startStack({ name: 'ai-chunk-schema' });
  t.after(() => stack.stop());
  const schema = uiMessageChunkSchema();
  const cases = corpus(await deriveChunkTable());
  const c = api(stack, newStream(stack, 'ui-schema'));
  ok(await c.open(undefined, 'ui'), 'open');
  let accepted = 0;
  let refused = 0;
  for (const { name, chunk, field } of cases) {
    const sdk = (await schema.validate(chunk)).success;
    const res = await c.append(`${JSON.stringify(chunk)}\n`);
    assert.ok(res.status === 200 || (res.status === 400 && res.json?.error === 'bad_chunk'), `${name}: ${res.status} ${res.raw}`);
    const worker = res.status === 200;
    assert.equal(worker, sdk, `${name}: the SDK ${sdk ? 'accepts' : 'refuses'} ${JSON.stringify(chunk)}, the Worker answered ${res.status} ${res.raw}`);
    if (sdk) {
      accepted += 1;
    } else {
      refused += 1;
      assert.equal(res.json.field, field, `${name}: the field named (${res.json.message})`);
      assert.ok(res.json.message.includes(field === 'type' ? 'type' : `"${field}"`), `${name}: the message names it: ${res.json.message}`);
    }
  }
  t.diagnostic(`${cases.length} chunks: ${accepted} accepted and ${refused} refused by both the SDK and the Worker`);
  assert.ok(refused >= 150 && accepted >= 60, `${accepted} accepted, ${refused} refused`);
});
