// Derives the table of UI message chunks that a `ui` stream's strict validation checks
// (src/engine/wire/ui_chunks.json, read by src/engine/wire/ui_schema.rs) from the AI SDK's own zod schema,
// `uiMessageChunkSchema` of the installed `ai` package: each chunk type with its fields, each
// field's type and whether it is required, plus the `data-*` types.
//
//   node scripts/ui-chunk-schema.mjs           rewrite src/engine/wire/ui_chunks.json
//   node scripts/ui-chunk-schema.mjs --check   exit 1 if the file differs from the installed SDK
//
// tests/ai/chunk-schema.test.mjs runs the same derivation, so the table cannot drift from the
// SDK without a failing test. A schema construct the table cannot express makes this throw,
// rather than be approximated.
//
// The zod schema is not exported (the SDK exports a wrapper around it), so it is caught as the
// SDK builds it: zod's constructor reads `inst._zod` once on every new schema instance, and a
// getter on Object.prototype sees those reads for as long as it is installed.
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
export const TABLE_FILE = join(ROOT, 'src', 'engine', 'wire', 'ui_chunks.json');

/** The zod schema behind `uiMessageChunkSchema`, caught as the SDK builds it (once per process). */
let caught;
const sdkChunkSchema = () => (caught ??= catchChunkSchema());

async function catchChunkSchema() {
  const { uiMessageChunkSchema } = await import('ai');
  const built = [];
  Object.defineProperty(Object.prototype, '_zod', {
    configurable: true,
    get() {
      built.push(this);
      return undefined;
    },
  });
  try {
    uiMessageChunkSchema(); // lazy: builds the zod schema on its first call
  } finally {
    delete Object.prototype._zod;
  }
  const isChunkUnion = (s) =>
    s._zod?.def?.type === 'union' && s._zod.def.options.some((o) => o._zod.def.shape?.type?._zod.def.values?.includes('text-start'));
  const unions = built.filter(isChunkUnion);
  if (unions.length !== 1) {
    throw new Error(`expected one zod union of UI message chunks while building uiMessageChunkSchema, found ${unions.length} (was it built before?)`);
  }
  return unions[0];
}

const unsupported = (what, def) => {
  throw new Error(`scripts/ui-chunk-schema.mjs cannot express ${what}: ${JSON.stringify(def, (k, v) => (k === '_zod' ? undefined : v))?.slice(0, 200)}`);
};

/** zod's JSON value schema (a lazy union of the JSON kinds, recursive): the table's "json". */
function isJsonValue(def) {
  if (def.type !== 'lazy') return false;
  const kinds = def.getter()._zod.def.options?.map((o) => o._zod.def.type).sort();
  return JSON.stringify(kinds) === JSON.stringify(['array', 'boolean', 'null', 'number', 'record', 'string']);
}

/** One zod schema as a type of the table (see src/engine/wire/ui_schema.rs for the grammar). */
function typeOf(schema) {
  const def = schema._zod.def;
  switch (def.type) {
    case 'string':
    case 'boolean':
    case 'unknown':
      if (def.checks?.length) unsupported(`checks on a ${def.type}`, def);
      return def.type;
    case 'number': {
      const number = {};
      for (const check of def.checks ?? []) {
        const c = check._zod.def;
        if (c.check === 'number_format' && c.format === 'safeint') number.integer = true;
        else if (c.check === 'greater_than' && c.inclusive) number.min = c.value;
        else unsupported('a number check', c);
      }
      return Object.keys(number).length ? { number } : 'number';
    }
    case 'literal':
      if (def.values.length !== 1 || typeof def.values[0] !== 'string') unsupported('a literal', def);
      return { literal: def.values[0] };
    case 'enum':
      return { enum: Object.values(def.entries) };
    case 'optional':
      return { optional: typeOf(def.innerType) };
    case 'record':
      if (def.keyType._zod.def.type !== 'string') unsupported('a record whose keys are not strings', def);
      return { record: typeOf(def.valueType) };
    case 'array':
      return { array: typeOf(def.element) };
    case 'object':
      // Objects and loose objects both accept keys they do not name (a strict one would not).
      if (def.catchall && def.catchall._zod.def.type !== 'unknown') unsupported('an object with a catchall', def);
      return { object: fieldsOf(def.shape) };
    case 'union':
      return { union: def.options.map(typeOf) };
    case 'lazy':
      if (isJsonValue(def)) return 'json';
      return unsupported('a lazy schema other than a JSON value', def);
    case 'pipe':
      // `kind: string → identity transform`: the transform cannot refuse anything.
      if (def.out._zod.def.type !== 'transform') unsupported('a pipe into something other than a transform', def);
      return typeOf(def.in);
    default:
      return unsupported(`a zod ${def.type}`, def);
  }
}

const fieldsOf = (shape) => Object.fromEntries(Object.entries(shape).map(([name, schema]) => [name, typeOf(schema)]));

/** The `data-` of `z.custom((value) => typeof value === "string" && value.startsWith("data-"))`. */
function typePrefixOf(custom) {
  const fn = custom._zod.def.fn;
  const prefix = /startsWith\("([^"]+)"\)/.exec(String(fn))?.[1];
  if (!prefix || !fn(`${prefix}x`) || fn(prefix.slice(0, -1)) || fn(`x${prefix}`)) unsupported('a custom chunk type other than a string prefix', custom._zod.def);
  return prefix;
}

/** The table, as src/engine/wire/ui_chunks.json holds it. */
export async function deriveChunkTable() {
  const union = await sdkChunkSchema();
  const types = {};
  const typePrefixes = {};
  for (const option of union._zod.def.options) {
    const { type, ...shape } = option._zod.def.shape;
    const fields = fieldsOf(shape);
    const tdef = type._zod.def;
    if (tdef.type === 'literal' && tdef.values.length === 1) types[tdef.values[0]] = fields;
    else if (tdef.type === 'custom') typePrefixes[typePrefixOf(type)] = fields;
    else unsupported('a chunk whose type is neither a literal nor a prefix', tdef);
  }
  const version = createRequire(join(ROOT, 'package.json'))('ai/package.json').version;
  return { source: `ai@${version} uiMessageChunkSchema, derived by scripts/ui-chunk-schema.mjs (do not edit by hand)`, types, typePrefixes };
}

/** The table as JSON text, one chunk type per line. */
export function formatTable({ source, types, typePrefixes }) {
  const entries = (map) => Object.entries(map).map(([name, fields]) => `    ${JSON.stringify(name)}: ${JSON.stringify(fields)}`).join(',\n');
  return `{\n  "source": ${JSON.stringify(source)},\n  "types": {\n${entries(types)}\n  },\n  "typePrefixes": {\n${entries(typePrefixes)}\n  }\n}\n`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const text = formatTable(await deriveChunkTable());
  if (process.argv.includes('--check')) {
    const same = readFileSync(TABLE_FILE, 'utf8') === text;
    console.log(same ? `${TABLE_FILE} matches the installed ai` : `${TABLE_FILE} differs from the installed ai: run node scripts/ui-chunk-schema.mjs`);
    process.exit(same ? 0 : 1);
  }
  writeFileSync(TABLE_FILE, text);
  console.log(`wrote ${TABLE_FILE}`);
}
