// The dev build (`scripts/build.sh --dev`, into build-dev/) as the second Worker of a two-config
// `wrangler dev` (the example chat in front of rindle-streams: scripts/run.sh, and the e2e
// harness's startStack({ chat: true })).
//
// wrangler.toml's `main` is the production build (build/), which `wrangler deploy` bundles; a
// single-Worker `wrangler dev` is pointed at the dev build by its positional script
// (`wrangler dev build-dev/worker/shim.mjs`). A second config takes no positional script, and it
// reads its var overrides and secrets only from the `.dev.vars` next to it. So this writes a copy
// of wrangler.toml whose `main` is the dev build (relative paths made absolute), with a
// `.dev.vars` beside it.
//
// With the Postgres backend (`backend: 'postgres'`, or BACKEND=postgres on the command line) the
// copy also declares the `HYPERDRIVE` binding, its localConnectionString the cluster's URL
// (scripts/pg.sh), and sets DURABLE_BACKEND = "postgres" (docs/POSTGRES.md). wrangler.toml keeps
// the binding commented out: `wrangler dev` refuses to start with a Hyperdrive binding that has
// no local connection string, even on D1.
//
// The example chat (examples/chat/) on Postgres gets a copy of its config too, with its own
// `HYPERDRIVE` binding to the same database (its store.js then keeps the messages there).
//
//   node scripts/dev-config.mjs DIR [DEV_VARS_FILE]   writes DIR/wrangler.toml (and DIR/.dev.vars,
//                                                      a copy of DEV_VARS_FILE); prints its path
//                                                      (with DB_MODEL_WRITE_MS set: the model's binding too)
//   BACKEND=postgres PG_URL=postgres://… node scripts/dev-config.mjs DIR [DEV_VARS_FILE]
//   PG_URL=postgres://… node scripts/dev-config.mjs --chat DIR   the example chat's copy, on Postgres
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The dev build's entry module under the project root `root`. */
export const devShim = (root) => join(root, 'build-dev', 'worker', 'shim.mjs');

/**
 * A Hyperdrive binding of the Postgres backend (`HYPERDRIVE`, or `HYPERDRIVE_EU` … for the
 * databases beside it), served locally by the database at `pgUrl`.
 */
export const hyperdriveBinding = (pgUrl, binding = 'HYPERDRIVE', n = 0) =>
  `\n[[hyperdrive]]\nbinding = ${JSON.stringify(binding)}\nid = "${String(n).padStart(32, '0')}"\nlocalConnectionString = ${JSON.stringify(pgUrl)}\n`;

/** The binding of database `name` beside the default one on `backend`: `DB_EU`, `HYPERDRIVE_EU`. */
export const databaseBinding = (backend, name) => `${backend === 'postgres' ? 'HYPERDRIVE' : 'DB'}_${name.toUpperCase()}`;

/**
 * The binding of the dev build's model of the database (docs/LOAD.md, "The model in the dev
 * build"): one object per database, whose class only the dev build exports (so wrangler.toml,
 * which `wrangler deploy` reads, cannot name it).
 */
export const modelBinding = () =>
  '\n[[durable_objects.bindings]]\nname = "DB_MODEL"\nclass_name = "DatabaseModelObject"\n\n[[migrations]]\ntag = "dev-model"\nnew_classes = ["DatabaseModelObject"]\n';

/**
 * The D1 binding of database `name` beside the default one (`DB_<NAME>`, its own local database:
 * docs/LOAD.md, "From one database to many"), its migrations the project's.
 */
export const d1Binding = (root, name, n) =>
  `\n[[d1_databases]]\nbinding = "${databaseBinding('d1', name)}"\ndatabase_name = "rindle-${name}"\n` +
  `database_id = "00000000-0000-0000-0000-${String(n).padStart(12, '0')}"\nmigrations_dir = ${JSON.stringify(join(root, 'migrations'))}\n`;

/**
 * Writes `dir/wrangler.toml`: the project's wrangler.toml serving the dev build, and
 * `dir/.dev.vars` with `devVars` (a string in .dev.vars syntax). Returns the config's path.
 * `backend: 'postgres'` adds the Hyperdrive binding to the database at `pgUrl` and sets
 * DURABLE_BACKEND; `model: true` adds the model of the database's binding (its `DB_MODEL_*`
 * variables choose it); `databases: ['eu', …]` adds a database for each: on D1 a local D1
 * database `DB_EU` …, on Postgres a Hyperdrive binding `HYPERDRIVE_EU` … to the database at
 * `databaseUrls.eu` ….
 */
export function writeDevConfig({ root, dir, devVars = '', backend = 'd1', pgUrl, model = false, databases = [], databaseUrls = {} }) {
  if (backend !== 'd1' && backend !== 'postgres') throw new Error(`backend ${JSON.stringify(backend)}: must be "d1" or "postgres"`);
  if (backend === 'postgres' && !pgUrl) throw new Error('the postgres backend needs the database URL (scripts/pg.sh url)');
  mkdirSync(dir, { recursive: true });
  let toml = readFileSync(join(root, 'wrangler.toml'), 'utf8')
    .replace(/^main = .*$/m, `main = ${JSON.stringify(devShim(root))}`)
    .replace(/^migrations_dir = .*$/m, `migrations_dir = ${JSON.stringify(join(root, 'migrations'))}`)
    .replace(/^DURABLE_BACKEND = .*$/m, `DURABLE_BACKEND = ${JSON.stringify(backend)}`);
  if (backend === 'postgres') toml += hyperdriveBinding(pgUrl);
  if (model) toml += modelBinding();
  for (const [i, name] of databases.entries()) {
    if (backend === 'postgres' && !databaseUrls[name]) throw new Error(`database ${JSON.stringify(name)} on postgres needs its URL (databaseUrls)`);
    toml += backend === 'postgres' ? hyperdriveBinding(databaseUrls[name], databaseBinding(backend, name), i + 1) : d1Binding(root, name, i + 1);
  }
  writeFileSync(join(dir, 'wrangler.toml'), toml);
  writeFileSync(join(dir, '.dev.vars'), devVars);
  return join(dir, 'wrangler.toml');
}

/**
 * Writes `dir/wrangler.toml`: the example chat's config (examples/chat/wrangler.toml, its
 * relative paths made absolute) with the Hyperdrive binding to the database at `pgUrl`. Returns
 * the config's path.
 */
export function writeChatConfig({ root, dir, pgUrl }) {
  if (!pgUrl) throw new Error('the example chat on postgres needs the database URL (scripts/pg.sh url)');
  const chat = join(root, 'examples', 'chat');
  mkdirSync(dir, { recursive: true });
  const toml = readFileSync(join(chat, 'wrangler.toml'), 'utf8')
    .replace(/^main = "(.*)"$/m, (_, main) => `main = ${JSON.stringify(join(chat, main))}`)
    .replace(/^directory = "(.*)"$/m, (_, assets) => `directory = ${JSON.stringify(join(chat, assets))}`)
    .replace(/^migrations_dir = "(.*)"$/m, (_, migrations) => `migrations_dir = ${JSON.stringify(join(chat, migrations))}`);
  writeFileSync(join(dir, 'wrangler.toml'), toml + hyperdriveBinding(pgUrl));
  return join(dir, 'wrangler.toml');
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = process.env.RINDLE_ROOT ?? resolve(dirname(fileURLToPath(import.meta.url)), '..');
  if (process.argv[2] === '--chat') {
    const dir = process.argv[3];
    if (!dir) throw new Error('usage: PG_URL=postgres://… node scripts/dev-config.mjs --chat DIR');
    console.log(writeChatConfig({ root, dir: resolve(dir), pgUrl: process.env.PG_URL }));
    process.exit(0);
  }
  const [dir, devVarsFile] = process.argv.slice(2);
  if (!dir) throw new Error('usage: node scripts/dev-config.mjs DIR [DEV_VARS_FILE]');
  const model = Boolean(process.env.DB_MODEL_WRITE_MS);
  const config = writeDevConfig({ root, dir: resolve(dir), backend: process.env.BACKEND || 'd1', pgUrl: process.env.PG_URL, model });
  if (devVarsFile) copyFileSync(devVarsFile, join(dirname(config), '.dev.vars'));
  console.log(config);
}
