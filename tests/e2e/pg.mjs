// The e2e tests' Postgres backend (startStack({ backend: 'postgres' }), or RINDLE_E2E_BACKEND=postgres):
// each stack gets a database of its own on the cluster of scripts/pg.sh (RINDLE_PG_URL, which
// scripts/test.sh sets), migrated with migrations/postgres/, and `stack.db` answers the tests'
// SQL there through `psql`, synchronously, as node:sqlite answers it on local D1.
//
// The tests' statements are written for SQLite; the few differences this adapter bridges:
// `?` placeholders (bound as psql variables, quoted literals whose type the server infers), the
// chunk table's camel-case column `streamId` (quoted), and booleans read back as 0/1 (D1 has no
// boolean: the `cancel` column reads 0/1 on both).
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The backend the e2e stacks use unless a test names one: RINDLE_E2E_BACKEND, default d1. */
export const E2E_BACKEND = process.env.RINDLE_E2E_BACKEND || 'd1';
if (E2E_BACKEND !== 'd1' && E2E_BACKEND !== 'postgres') {
  throw new Error(`RINDLE_E2E_BACKEND=${E2E_BACKEND}: must be "d1" or "postgres"`);
}

export const PSQL = ['/usr/bin/psql', ...readdirSafe('/usr/lib/postgresql').sort().reverse().map((v) => `/usr/lib/postgresql/${v}/bin/psql`)]
  .find((p) => existsSync(p)) ?? 'psql';

function readdirSafe(dir) {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** The cluster's URL; a postgres stack without one fails (never skips). */
export function clusterUrl() {
  const url = process.env.RINDLE_PG_URL;
  if (!url) throw new Error('the postgres backend needs RINDLE_PG_URL (scripts/test.sh sets it; by hand: export RINDLE_PG_URL=$(scripts/pg.sh start))');
  return url;
}

/** `url` with its database replaced by `db`. */
export const withDatabase = (url, db) => {
  const u = new URL(url);
  u.pathname = `/${db}`;
  return u.toString();
};

function psql(url, args, input) {
  return execFileSync(PSQL, ['-X', '-v', 'ON_ERROR_STOP=1', '-d', url, ...args], {
    encoding: 'utf8',
    input,
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, PGCONNECT_TIMEOUT: '10' },
  });
}

/** A new database `name` on the cluster with `migrationsDir`'s SQL applied; its URL. */
export function createDatabase(name, migrationsDir) {
  const admin = clusterUrl();
  psql(admin, ['-q', '-c', `DROP DATABASE IF EXISTS "${name}"`]);
  psql(admin, ['-q', '-c', `CREATE DATABASE "${name}"`]);
  const url = withDatabase(admin, name);
  const sql = readdirSync(migrationsDir).filter((f) => f.endsWith('.sql')).sort().map((f) => readFileSync(join(migrationsDir, f), 'utf8')).join('\n');
  psql(url, ['-q'], sql);
  return url;
}

/** Drops database `name` (its connections ended first). */
export function dropDatabase(name) {
  const admin = clusterUrl();
  try {
    psql(admin, ['-q', '-c', `DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`]);
  } catch {
    /* the cluster is gone already: nothing to drop */
  }
}

/** SQLite-flavoured SQL and its params as psql input: `?` become `:'pN'` variables. */
function translate(sql, params) {
  if (params.length === 1 && params[0] && typeof params[0] === 'object') throw new Error('stack.db (postgres): named parameters are not supported');
  let n = 0;
  const text = sql
    .replace(/\?/g, () => `:'p${++n}'`)
    .replace(/(?<!")\bstreamId\b(?!")/g, '"streamId"');
  if (n !== params.length) throw new Error(`stack.db (postgres): ${n} placeholders, ${params.length} params: ${sql}`);
  const vars = params.flatMap((v, i) => {
    if (v === null || v === undefined) throw new Error('stack.db (postgres): NULL parameters are not supported; write NULL in the SQL');
    return ['-v', `p${i + 1}=${typeof v === 'boolean' ? (v ? 1 : 0) : String(v)}`];
  });
  return { text, vars };
}

/** Booleans as D1 reads them (0/1). */
const asD1 = (row) => Object.fromEntries(Object.entries(row).map(([k, v]) => [k, typeof v === 'boolean' ? Number(v) : v]));

/** `stack.db` on the Postgres database at `url`: run, get, all, exec as openDb's. */
export function openPgDb(url) {
  const rows = (sql, params) => {
    const { text, vars } = translate(sql.trim().replace(/;\s*$/, ''), params);
    const out = psql(url, ['-q', '-A', '-t', ...vars], `SELECT coalesce(json_agg(t), '[]'::json) FROM (${text}) t;\n`);
    return JSON.parse(out.trim()).map(asD1);
  };
  return {
    url,
    /** INSERT/UPDATE/DELETE; returns { changes } (from the command tag). */
    run: (sql, ...params) => {
      const { text, vars } = translate(sql, params);
      const out = psql(url, ['-A', '-t', ...vars], `${text};\n`);
      const tag = out.trim().split('\n').pop() ?? '';
      return { changes: Number(tag.split(' ').pop()) || 0 };
    },
    /** First row or undefined. */
    get: (sql, ...params) => rows(sql, params)[0],
    /** All rows. */
    all: (sql, ...params) => rows(sql, params),
    /** Several statements, no parameters. */
    exec: (sql) => {
      psql(url, ['-q'], sql);
    },
    get raw() {
      throw new Error('stack.db.raw is a node:sqlite DatabaseSync on D1; this stack is on Postgres');
    },
    close() {},
  };
}
