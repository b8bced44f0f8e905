// End-to-end harness: runs the real Worker under `wrangler dev` (workerd + local D1) on an
// isolated, throwaway state directory, and gives tests direct SQL access to its D1 database.
//
//   import { startStack, mintToken, readSse } from './harness.mjs';
//   const stack = await startStack({ vars: { CHECKPOINT_CHARS: '8' } });
//   t.after(() => stack.stop());
//   stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES (?, 'c1', 'assistant')`, 'm1');
//   const token = stack.token('m1');                       // HS256, scope "read write cancel"
//   await fetch(`${stack.baseUrl}/streams/m1/open`, { method: 'POST', headers: { authorization: `Bearer ${token}` } });
//
// Every wrangler/workerd process runs in its own process group and is killed with it when
// the test process exits, is signalled, or dies (a detached watchdog covers SIGKILL).
// Logs go to test-artifacts/e2e/. RINDLE_E2E_KEEP=1 keeps the temp state dirs.
import { spawn, execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  cpSync, createWriteStream, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, utimesSync, writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createParser } from 'eventsource-parser';
import { mintToken as mintTokenImpl, decodeToken, verifyToken } from '../../scripts/jwt.mjs';
import { databaseBinding, devShim, writeChatConfig, writeDevConfig } from '../../scripts/dev-config.mjs';
import { E2E_BACKEND, createDatabase, dropDatabase, openPgDb } from './pg.mjs';
import { asBuffer, openSqlite, plainRow } from './sqlite.mjs';

export { E2E_BACKEND };

export { decodeToken, verifyToken };

/** Project root (RINDLE_ROOT overrides, for running the harness against a scratch project). */
export const ROOT = resolve(process.env.RINDLE_ROOT ?? join(dirname(fileURLToPath(import.meta.url)), '..', '..'));
/** The dev build every stack serves (`scripts/build.sh --dev`: the dev endpoints, fault injection, the heap counter). */
export const SHIM = devShim(ROOT);
/** The production build (`scripts/build.sh`), what `wrangler deploy` bundles: startStack({ production: true }). */
export const PRODUCTION_SHIM = join(ROOT, 'build', 'worker', 'shim.mjs');
export const MOCK_SERVER = join(ROOT, 'mock', 'model-server.mjs');
export const ARTIFACTS = join(ROOT, 'test-artifacts', 'e2e');
/** STREAM_JWT_SECRET every stack gets unless startStack({ secret }) says otherwise. */
export const TEST_SECRET = 'e2e-test-secret-0123456789abcdef';

const WRANGLER = join(ROOT, 'node_modules', '.bin', 'wrangler');
const BARE_SERVE = join(ROOT, 'bench', 'bare-serve.mjs');
const requireFromRoot = createRequire(join(ROOT, 'package.json'));
const execFileP = promisify(execFile);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const BASE_ENV = {
  ...process.env,
  WRANGLER_SEND_METRICS: 'false',
  CLOUDFLARE_CF_FETCH_ENABLED: 'false',
  WRANGLER_LOG_SANITIZE: 'true',
  BROWSER: 'none',
  NO_COLOR: '1',
  FORCE_COLOR: '0',
};

/** True when the Worker's dev build has been built (scripts/build.sh --dev). */
export const haveBuild = () => existsSync(SHIM);

/** Mint an HS256 token; see scripts/jwt.mjs for the knobs that make bad tokens. */
export function mintToken(claims = {}, secret = TEST_SECRET) {
  return mintTokenImpl(claims, secret);
}

// ---------------------------------------------------------------------------------------
// Process bookkeeping: every process group we start is killed when this process goes away.

const liveGroups = new Set(); // pgids
const tempDirs = new Set();
const pgDatabases = new Set(); // the postgres stacks' databases, dropped at exit
let hooksInstalled = false;

function killGroup(pgid, signal = 'SIGKILL') {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false; // already gone
  }
}

function installExitHooks() {
  if (hooksInstalled) return;
  hooksInstalled = true;
  process.on('exit', () => {
    for (const pgid of liveGroups) killGroup(pgid);
    if (process.env.RINDLE_E2E_KEEP !== '1') {
      for (const d of tempDirs) rmSync(d, { recursive: true, force: true });
      for (const db of pgDatabases) dropDatabase(db);
    }
  });
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.once(sig, () => {
      for (const pgid of liveGroups) killGroup(pgid);
      process.exit(128 + (os.constants.signals[sig] ?? 1));
    });
  }
}

// A detached watchdog kills the group if this test process dies without running its exit
// hooks (SIGKILL, OOM, a hung runner killed by its parent).
const WATCHDOG = `
const [parent, pgid] = process.argv.slice(1).map(Number);
const alive = (pid) => { try { process.kill(pid, 0); return true; } catch (e) { return e.code === 'EPERM'; } };
const t = setInterval(() => {
  if (!alive(-pgid)) { clearInterval(t); return; }
  if (!alive(parent)) { try { process.kill(-pgid, 'SIGKILL'); } catch {} clearInterval(t); }
}, 500);`;

function spawnGroup(cmd, args, { cwd = ROOT, env = BASE_ENV, logFile } = {}) {
  installExitHooks();
  const child = spawn(cmd, args, { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  const pgid = child.pid;
  liveGroups.add(pgid);
  const watchdog = spawn(process.execPath, ['-e', WATCHDOG, String(process.pid), String(pgid)], {
    detached: true,
    stdio: 'ignore',
  });
  watchdog.unref();

  let text = '';
  const listeners = new Set();
  const log = logFile ? createWriteStream(logFile, { flags: 'a' }) : null;
  const onData = (chunk) => {
    const s = chunk.toString();
    text += s;
    if (text.length > 4_000_000) text = text.slice(-2_000_000);
    log?.write(s);
    for (const l of listeners) l();
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  let gone = false;
  const exited = new Promise((res) => child.once('exit', (code, signal) => res({ code, signal })));
  exited.then(async () => {
    // The leader is gone; its children may not be. Only forget the group once it is empty,
    // so a pgid is never signalled after the kernel could have reused it.
    await waitGroupGone(pgid);
    if (groupAlive(pgid)) killGroup(pgid);
    await waitGroupGone(pgid);
    gone = true;
    liveGroups.delete(pgid);
    log?.end();
    for (const l of listeners) l();
  });
  return {
    child,
    pgid,
    exited,
    get output() {
      return text;
    },
    onOutput(fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
    /** True once every process of the group has exited. */
    get gone() {
      return gone;
    },
    /** SIGTERM the group, then SIGKILL whatever is left after graceMs; resolves once gone. */
    async terminate(graceMs = 3000) {
      if (gone) return;
      killGroup(pgid, 'SIGTERM');
      const done = await Promise.race([exited.then(() => true), sleep(graceMs).then(() => false)]);
      killGroup(pgid, 'SIGKILL'); // children (workerd) may outlive the leader
      if (!done) await exited;
      await waitGroupGone(pgid);
    },
    async kill() {
      if (gone) return;
      killGroup(pgid, 'SIGKILL');
      await exited;
      await waitGroupGone(pgid);
    },
  };
}

/** Is any non-zombie process left in group `pgid`? (Zombies wait for PID 1 to reap them.) */
export function groupAlive(pgid) {
  try {
    process.kill(-pgid, 0);
  } catch {
    return false;
  }
  if (process.platform !== 'linux') return true;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // state ppid pgrp ...
      if (Number(fields[2]) === pgid && fields[0] !== 'Z') return true;
    } catch {
      /* exited meanwhile */
    }
  }
  return false;
}

async function waitGroupGone(pgid, timeoutMs = 5000) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end && groupAlive(pgid)) await sleep(25);
}

// ---------------------------------------------------------------------------------------
// Ports

/** A TCP port that was free on 127.0.0.1 a moment ago. */
export function freePort() {
  return new Promise((res, rej) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => res(port));
    });
  });
}

function portAccepts(port) {
  return new Promise((res) => {
    const s = net.connect({ port, host: '127.0.0.1' });
    s.once('connect', () => {
      s.destroy();
      res(true);
    });
    s.once('error', () => res(false));
  });
}

async function waitPortFree(port, timeoutMs = 10_000) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end && (await portAccepts(port))) await sleep(100);
}

// ---------------------------------------------------------------------------------------
// D1 state: migrations are applied once into a template dir (cached across test processes,
// keyed by the migrations' contents), then copied into each stack's persist dir.

const D1_SUBDIR = join('v3', 'd1', 'miniflare-D1DatabaseObject');

function migrationsKey() {
  const h = createHash('sha256');
  const dir = join(ROOT, 'migrations');
  for (const f of readdirSync(dir).filter((f) => f.endsWith('.sql')).sort()) {
    h.update(f).update('\0').update(readFileSync(join(dir, f))).update('\0');
  }
  h.update(readFileSync(join(ROOT, 'wrangler.toml')));
  h.update(readFileSync(join(ROOT, 'node_modules', 'wrangler', 'package.json')));
  return h.digest('hex').slice(0, 16);
}

/** Apply migrations/*.sql to a local D1 state dir with wrangler (what scripts/run.sh does). */
export async function applyMigrations(persistDir, { binding = 'DB', config } = {}) {
  try {
    await execFileP(WRANGLER, ['d1', 'migrations', 'apply', binding, '--local', '--persist-to', persistDir, ...(config ? ['--config', config] : [])], {
      cwd: ROOT,
      env: { ...BASE_ENV, CI: 'true' }, // CI=true: never prompt
      maxBuffer: 16 * 1024 * 1024,
    });
  } catch (e) {
    throw new Error(`wrangler d1 migrations apply failed:\n${e.stdout ?? ''}\n${e.stderr ?? e.message}`);
  }
}

let templatePromise;
function migratedTemplate() {
  templatePromise ??= (async () => {
    const dir = join(os.tmpdir(), `rindle-e2e-d1-template-${migrationsKey()}`);
    if (existsSync(join(dir, '.complete'))) return dir;
    const tmp = mkdtempSync(`${dir}.tmp-`);
    await applyMigrations(tmp);
    writeFileSync(join(tmp, '.complete'), new Date().toISOString());
    try {
      renameSync(tmp, dir);
    } catch {
      rmSync(tmp, { recursive: true, force: true }); // another process won the race
    }
    return dir;
  })();
  return templatePromise;
}

/** The sqlite files backing the local D1 databases under a persist dir. */
function d1Files(persistDir) {
  const dir = join(persistDir, D1_SUBDIR);
  return existsSync(dir) ? readdirSync(dir).filter((f) => /^[0-9a-f]{64}\.sqlite$/.test(f)).map((f) => join(dir, f)) : [];
}

/** The sqlite file backing the local D1 database under a persist dir (which must hold one). */
export function d1File(persistDir) {
  const files = d1Files(persistDir);
  if (files.length !== 1) throw new Error(`expected one D1 sqlite file in ${join(persistDir, D1_SUBDIR)}, found ${JSON.stringify(files)}`);
  return files[0];
}

/**
 * Direct SQL on the local D1 database (node:sqlite, WAL mode, 5 s busy timeout: sqlite.mjs).
 * workerd keeps the same file open; SQLite's WAL locking makes this safe, and writes made here
 * are visible to the Worker's next query and vice versa (checked in harness.test.mjs).
 */
export function openDb(persistDir, file) {
  let conn;
  const path = () => file ?? d1File(persistDir);
  const c = () => {
    conn ??= openSqlite(path());
    return conn;
  };
  return {
    get file() {
      return path();
    },
    /** INSERT/UPDATE/DELETE; returns { changes, lastInsertRowid }. Params: positional or one object. */
    run: (sql, ...params) => c().prepare(sql).run(...params),
    /** First row (a plain object) or undefined. */
    get: (sql, ...params) => plainRow(c().prepare(sql).get(...params)),
    /** All rows (plain objects). */
    all: (sql, ...params) => c().prepare(sql).all(...params).map(plainRow),
    /** Several statements, no parameters. */
    exec: (sql) => c().exec(sql),
    /** The underlying node:sqlite DatabaseSync. */
    get raw() {
      return c();
    },
    close() {
      conn?.close();
      conn = undefined;
    },
  };
}

/**
 * What the stream objects of a stack keep in their own storage: for each object's local SQLite
 * file (`<persist>/v3/do/<script>-StreamObject/*.sqlite`), the keys of its storage API (the
 * `_cf_KV` table) as `{ key: value }` (`null`: the file could not be read just now, mid-write).
 * Read-only, beside workerd (WAL, as `openDb`); a file workerd removed is left out.
 */
export function objectStorage(persistDir) {
  const root = join(persistDir, 'v3', 'do');
  const dirs = existsSync(root) ? readdirSync(root).filter((d) => d.endsWith('-StreamObject')) : [];
  const objects = [];
  for (const dir of dirs) {
    for (const f of readdirSync(join(root, dir)).filter((f) => f.endsWith('.sqlite'))) {
      const file = join(root, dir, f);
      let conn;
      try {
        conn = openSqlite(file, { readOnly: true });
        const hasKv = conn.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_cf_KV'").get();
        const keys = hasKv ? Object.fromEntries(conn.prepare('SELECT key, value FROM _cf_KV').all().map((r) => [r.key, asBuffer(r.value)])) : {};
        objects.push({ file, keys });
      } catch (e) {
        // A file workerd removed meanwhile holds nothing; one caught mid-write (a rollback, a
        // lock) is unknown for now: `keys: null`, and the caller asks again.
        if (existsSync(file)) objects.push({ file, keys: null, error: e.message });
      } finally {
        conn?.close();
      }
    }
  }
  return objects;
}

// ---------------------------------------------------------------------------------------
// The stack

/** The example chat's wrangler config (examples/chat/): the primary Worker of a chat stack. */
export const CHAT_CONFIG = join(ROOT, 'examples', 'chat', 'wrangler.toml');

async function buildChatPage() {
  const { buildChatPage: build } = await import(join(ROOT, 'examples', 'chat', 'build.mjs'));
  await build();
}

/**
 * rindle-streams as the second Worker of a two-config `wrangler dev`: `--var` and `--env-file`
 * reach only the first Worker, and a config's `.dev.vars` (which overrides its [vars]) is read
 * next to it. So: a copy of wrangler.toml serving the dev build, and the vars in a `.dev.vars`
 * (scripts/dev-config.mjs).
 */
function writeAuxiliaryConfig(dir, vars, { backend = 'd1', pgUrl } = {}) {
  return writeDevConfig({ root: ROOT, dir, devVars: dotenv(vars), backend, pgUrl });
}

function dotenv(values) {
  return Object.entries(values).map(([k, v]) => {
    v = typeof v === 'string' ? v : JSON.stringify(v);
    if (/['\n\r]/.test(v)) throw new Error(`${k}: single quotes and newlines are not supported`);
    return `${k}='${v}'`;
  }).join('\n') + '\n';
}

/**
 * Makes the other `wrangler dev` processes of a dev registry read it again. Each watches the
 * directory and re-reads it on any change, but a restarted process's new entry is sometimes
 * missed (its service binding then answers 503 "Worker … not found" until the next heartbeat,
 * up to 30 s later): touching the entries is what that heartbeat does.
 */
function touchRegistry(registry) {
  const now = new Date();
  for (const name of readdirSync(registry)) {
    try {
      utimesSync(join(registry, name), now, now);
    } catch {
      /* gone meanwhile */
    }
  }
}

let stackCounter = 0;

/**
 * Start the Worker under `wrangler dev` on its own temp state.
 *
 * options:
 *   vars       { KEY: value }  overrides of wrangler.toml [vars] (passed as --var KEY:VALUE)
 *   port       fixed HTTP port (default: a free one)
 *   secret     STREAM_JWT_SECRET (default TEST_SECRET); secrets { KEY: value } adds more
 *   persistDir reuse an existing state dir (default: a fresh one, migrations applied)
 *   timeoutMs  how long to wait for the server to answer (default 60 s)
 *   name       label for the log file in test-artifacts/e2e/
 *   config     another wrangler.toml (default: the project's), e.g. the benchmark's floor
 *   chat       start the example chat (examples/chat/) in front of rindle-streams instead: one
 *              `wrangler dev` with two configs, the example Worker first (it gets the port; it
 *              forwards /streams/* to rindle-streams over its service binding), one D1 database.
 *              `vars` still go to rindle-streams; `chatVars` go to the example Worker. With
 *              `backend: 'postgres'` both Workers get a Hyperdrive binding to the stack's database
 *              (the example keeps its messages there: examples/chat/store.js).
 *   front      another Worker's wrangler config served in front of rindle-streams as `chat` serves
 *              the example chat's (one `wrangler dev`, that Worker first, its service binding to
 *              rindle in-process; `chatVars` go to it): a test's own producer Worker
 *              (tests/survival/stop.test.mjs). Not with `chat`.
 *   demo       also serve the demo page and the vendorable JavaScript (public/) at /, as
 *              scripts/run.sh does (`--assets public`); the deployed service has no assets.
 *   bare       serve the Worker with bench/bare-serve.mjs instead of `wrangler dev` (the same
 *              config, miniflare and workerd, reached through a socket of its own: no entry
 *              Worker, no dev middleware, no dev proxy); not with `chat` or `demo`. For the
 *              benchmarks, and the hostile-traffic suites (hostile, fuzz): the dev proxy holds a
 *              denied request's answer until its upload ends, which production does not.
 *   production serve the production build (build/, what `wrangler deploy` bundles) instead of the
 *              dev build every other stack serves; not with `config` or `chat`.
 *   registry   a wrangler dev registry directory (WRANGLER_REGISTRY_PATH) shared with other stacks:
 *              a service binding reaches the Worker another stack serves (tests/survival/browser-chat:
 *              the example chat and rindle-streams in two processes, so one can be killed alone)
 *   script     serve this copy of a build's worker/shim.mjs instead (tests/survival/reload: a
 *              build wrangler dev reloads when the test rewrites it); not with `config` or `chat`.
 *   model      bind the dev build's model of the database (DB_MODEL; its DB_MODEL_* vars in
 *              `vars` choose it: docs/LOAD.md); the project's dev build alone.
 *   databases  names of databases beside the default one (['eu']: on D1 binding DB_EU, on
 *              Postgres HYPERDRIVE_EU to a database of its own; migrated, and DATABASES set;
 *              ids `eu:…` live there: docs/LOAD.md); `stack.dbs[name]` reads each
 *              (`stack.dbs.default` is `stack.db`). The project's dev build alone.
 *
 * returns { baseUrl, port, inspectorPort, persistDir, secret, db, token(stream, scope?, claims?),
 *           stop(), kill(), restart(opts?), logs(), waitForLog(re, ms), process }
 */
export async function startStack({
  vars = {},
  port,
  secret = TEST_SECRET,
  secrets = {},
  persistDir,
  timeoutMs = 60_000,
  name,
  config,
  chat = false,
  front,
  chatVars = {},
  demo = false,
  bare = false,
  production = false,
  script: scriptCopy,
  registry,
  backend,
  pgVia,
  model = false,
  databases = [],
} = {}) {
  // RINDLE_E2E_BACKEND applies to the stacks that can take it: the project's dev build alone.
  // RINDLE_E2E_CHAT_BACKEND=postgres serves the example chat's stacks (the browser tests) on
  // Postgres, both Workers: a run by hand (docs/TESTING.md), the test command keeps them on D1.
  if (chat && front) throw new Error('startStack: `chat` is a front Worker already; pass one of `chat` and `front`');
  backend ??= chat ? (process.env.RINDLE_E2E_CHAT_BACKEND ?? 'd1') : bare || front || config || production ? 'd1' : E2E_BACKEND;
  if (bare && (chat || demo)) throw new Error('startStack: `bare` serves one Worker, without `chat` or `demo`');
  if (production && (config || chat)) throw new Error('startStack: `production` serves the project\'s own Worker, without `config` or `chat`');
  if (backend === 'postgres' && (bare || config || production)) {
    throw new Error('startStack: the postgres backend serves the dev build (alone, or behind the example chat), without `bare`, `config` or `production`');
  }
  if (!haveBuild()) throw new Error(`${SHIM} is missing: run scripts/build.sh --dev first`);
  if (production && !existsSync(PRODUCTION_SHIM)) throw new Error(`${PRODUCTION_SHIM} is missing: run scripts/build.sh first`);
  // The project's own Worker is served from a build named on the command line (wrangler.toml's
  // `main` is the production build); another config serves its own `main`.
  if (scriptCopy && (config || chat || production)) throw new Error('startStack: `script` serves a copy of the project\'s build, without `config`, `chat` or `production`');
  if (front && (bare || config || production || scriptCopy || backend === 'postgres')) throw new Error('startStack: `front` serves the dev build on D1 behind one other Worker');
  const script = config || chat || front ? null : scriptCopy ?? (production ? PRODUCTION_SHIM : SHIM);
  installExitHooks();
  const id = `${process.pid}-${++stackCounter}`;
  const label = (name ?? 'stack').replace(/[^A-Za-z0-9_.-]+/g, '_');
  const base = mkdtempSync(join(os.tmpdir(), 'rindle-e2e-'));
  tempDirs.add(base);
  if (!persistDir) {
    persistDir = join(base, 'state');
    cpSync(await migratedTemplate(), persistDir, { recursive: true });
    rmSync(join(persistDir, '.complete'), { force: true });
  }
  if (chat) await buildChatPage();
  // Postgres: a database of the stack's own, and a copy of wrangler.toml with the Hyperdrive
  // binding to it and DURABLE_BACKEND = "postgres" (scripts/dev-config.mjs).
  let devConfig = null;
  let pgUrl = null;
  let workerPgUrl = null;
  // More databases (`databases`): on Postgres a database of the stack's own for each, beside
  // the default one.
  const databaseUrls = {};
  if (backend === 'postgres') {
    const database = `e2e_${id.replace(/\W/g, '_')}`;
    pgDatabases.add(database);
    pgUrl = createDatabase(database, join(ROOT, 'migrations', 'postgres'));
    for (const name of databases) {
      pgDatabases.add(`${database}_${name}`);
      databaseUrls[name] = createDatabase(`${database}_${name}`, join(ROOT, 'migrations', 'postgres'));
    }
    // `pgVia(url)`: the URL the Workers reach it by instead (a fault test's proxy).
    workerPgUrl = pgVia ? pgVia(pgUrl) : pgUrl;
    if (!chat) devConfig = writeDevConfig({ root: ROOT, dir: join(base, 'pg'), backend: 'postgres', pgUrl: workerPgUrl, model, databases, databaseUrls });
  }
  if ((model || databases.length > 0) && (chat || front || bare || config || production)) {
    throw new Error('startStack: `model` and `databases` serve the project\'s dev build alone');
  }
  // The model of the database, more databases on D1: a copy of wrangler.toml with their bindings
  // (only the dev build has the model's class), each D1 database migrated.
  const d1Databases = {};
  if ((model || databases.length > 0) && !devConfig) {
    devConfig = writeDevConfig({ root: ROOT, dir: join(base, 'dev'), backend: 'd1', model, databases });
    if (databases.length > 0) d1Databases.default = d1File(persistDir);
    for (const name of databases) {
      const before = new Set(d1Files(persistDir));
      await applyMigrations(persistDir, { binding: databaseBinding('d1', name), config: devConfig });
      d1Databases[name] = d1Files(persistDir).find((f) => !before.has(f));
    }
  }
  if (databases.length > 0) {
    const named = { default: backend === 'postgres' ? 'HYPERDRIVE' : 'DB', ...Object.fromEntries(databases.map((n) => [n, databaseBinding(backend, n)])) };
    vars = { DATABASES: JSON.stringify(named), ...vars };
  }
  const frontConfig = chat ? (backend === 'postgres' ? writeChatConfig({ root: ROOT, dir: join(base, 'chat'), pgUrl: workerPgUrl }) : CHAT_CONFIG) : front;
  const envFile = join(base, 'secrets.env');
  const writeEnvFile = (values) => writeFileSync(envFile, dotenv(values));
  mkdirSync(ARTIFACTS, { recursive: true });

  const stack = {
    port: port ?? (await freePort()),
    persistDir,
    secret,
    bare,
    backend,
    vars: { ...vars },
    chatVars: { ...chatVars },
    db: backend === 'postgres' ? openPgDb(pgUrl) : openDb(persistDir, d1Databases.default),
    /** Each D1 database by name (`databases`); `default` is `db`. */
    dbs: {},
    process: null,
    logFile: null,
    get baseUrl() {
      return `http://127.0.0.1:${this.port}`;
    },
    /** A valid token for `stream` signed with this stack's secret. */
    token(stream, scope = 'read write cancel', claims = {}) {
      return mintTokenImpl({ stream, scope, ...claims }, this.secret);
    },
    /** Everything wrangler/workerd printed since the last (re)start. */
    logs() {
      return this.process?.output ?? '';
    },
    /** Resolve when the log matches `re` (string or RegExp); reject after ms. */
    waitForLog(re, ms = 10_000) {
      const rx = typeof re === 'string' ? new RegExp(re.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')) : re;
      return new Promise((res, rej) => {
        const check = () => {
          const m = rx.exec(this.logs());
          if (m) {
            off();
            clearTimeout(timer);
            res(m);
          }
        };
        const off = this.process.onOutput(check);
        const timer = setTimeout(() => {
          off();
          rej(new Error(`log did not match ${rx} within ${ms} ms; log tail:\n${this.logs().slice(-3000)}`));
        }, ms);
        check();
      });
    },
    /** Graceful stop (SIGTERM, then SIGKILL after 3 s). State is kept for restart(). */
    async stop() {
      await this.process?.terminate();
      await waitPortFree(this.port);
    },
    /** SIGKILL the whole process group at once: a crash, for eviction/recovery tests. */
    async kill() {
      await this.process?.kill();
      await waitPortFree(this.port);
      if (registry) forgetRegistryEntries(registry, this.registryInstance);
    },
    /** Start again on the same state dir and port (stops a running instance first). */
    async restart({ vars: more = {}, secret: newSecret } = {}) {
      if (this.process && !this.process.gone) await this.stop();
      Object.assign(this.vars, more);
      if (newSecret !== undefined) this.secret = newSecret;
      await launch();
      if (registry) touchRegistry(registry);
      return this;
    },
  };

  // A port picked by freePort() can be taken by someone else before wrangler binds it: try
  // again with fresh ports (a restart keeps its public port, as a restarted server would).
  let started = false;
  const launch = async () => {
    for (let attempt = 1; ; attempt++) {
      try {
        await launchOnce();
        started = true;
        return;
      } catch (e) {
        if (attempt >= 4 || !/Address already in use/.test(String(e.message))) throw e;
        if (!started) stack.port = await freePort();
        await sleep(250 * attempt);
      }
    }
  };

  const launchOnce = async () => {
    writeEnvFile({ ...secrets, STREAM_JWT_SECRET: stack.secret });
    const inspectorPort = await freePort();
    stack.inspectorPort = inspectorPort; // the V8 inspector of the Worker (bench/profile.mjs)
    const args = [
      '--ip', '127.0.0.1',
      '--port', String(stack.port),
      '--inspector-port', String(inspectorPort),
      '--persist-to', stack.persistDir,
      '--env-file', envFile, // replaces .dev.vars, so a developer's .dev.vars never leaks in
    ];
    if (config) args.push('--config', config);
    if (devConfig) args.push('--config', devConfig);
    if (demo) args.push('--assets', join(ROOT, 'public'));
    const asVar = ([k, v]) => ['--var', `${k}:${typeof v === 'string' ? v : JSON.stringify(v)}`];
    let env = registry ? { ...BASE_ENV, WRANGLER_REGISTRY_PATH: registry } : BASE_ENV;
    if (frontConfig) {
      const rindle = writeAuxiliaryConfig(join(base, 'rindle'), { ...stack.vars, STREAM_JWT_SECRET: stack.secret }, { backend, pgUrl: workerPgUrl });
      args.push('--config', frontConfig, '--config', rindle);
      args.push(...Object.entries(stack.chatVars).flatMap(asVar));
      env = { ...BASE_ENV, WRANGLER_REGISTRY_PATH: join(base, 'registry') }; // no other dev process's workers
    } else {
      args.push(...Object.entries(stack.vars).flatMap(asVar));
    }
    stack.logFile = join(ARTIFACTS, `${label}-${id}.log`);
    // bare-serve.mjs takes the flags above and refuses others (a strict parseArgs); these are
    // `wrangler dev`'s own.
    const devOnly = ['--show-interactive-dev-session=false', '--live-reload=false', '--log-level', 'log'];
    const [server, command, commandArgs] = bare
      ? ['bare-serve', process.execPath, [BARE_SERVE, ...args, ...(script ? ['--script', script] : [])]]
      : ['wrangler dev', WRANGLER, ['dev', ...(script ? [script] : []), ...args, ...devOnly]];
    writeFileSync(stack.logFile, `$ ${command} ${commandArgs.join(' ')}\n`, { flag: 'a' });
    const othersInRegistry = registry ? new Set(registryEntries(registry).values()) : null;
    const proc = spawnGroup(command, commandArgs, { logFile: stack.logFile, env });
    stack.process = proc;
    const end = Date.now() + timeoutMs;
    for (;;) {
      if (proc.child.exitCode !== null || proc.child.signalCode !== null) {
        throw new Error(`${server} exited before it was ready (log ${stack.logFile}):\n${proc.output.slice(-4000)}`);
      }
      if (/Ready on http/.test(proc.output)) {
        try {
          const r = await fetch(`${stack.baseUrl}/`, { signal: AbortSignal.timeout(5000) });
          await r.arrayBuffer();
          // any HTTP answer means workerd is serving; in a shared registry, once it registered
          if (registry) stack.registryInstance = await registeredInstance(registry, othersInRegistry, end);
          return;
        } catch {
          /* not yet */
        }
      }
      if (Date.now() > end) {
        await proc.kill();
        throw new Error(`wrangler dev did not answer within ${timeoutMs} ms (log ${stack.logFile}):\n${proc.output.slice(-4000)}`);
      }
      await sleep(100);
    }
  };

  await launch();
  const openOther = (name) => (backend === 'postgres' ? openPgDb(databaseUrls[name]) : openDb(persistDir, d1Databases[name]));
  stack.dbs = { default: stack.db, ...Object.fromEntries(databases.map((name) => [name, openOther(name)])) };
  return stack;
}

// ---------------------------------------------------------------------------------------
// A dev registry shared by stacks (`registry`): the service bindings between `wrangler dev`
// processes. Each entry (a file named for a Worker) names the miniflare instance that wrote it
// (`instanceId`, miniflare 5 / wrangler 4.164), and another instance may not replace it until it
// is 90 s old: a SIGKILLed process's entries would keep its Workers' names for that long, so after
// a restart every binding to them still reached the dead process ("Network connection lost").
// kill() removes them, as the process's own exit does.

/** name → instanceId of a registry directory's entries. */
function registryEntries(dir) {
  const entries = new Map();
  for (const name of existsSync(dir) ? readdirSync(dir) : []) {
    try {
      const { instanceId } = JSON.parse(readFileSync(join(dir, name), 'utf8'));
      if (instanceId) entries.set(name, instanceId);
    } catch {
      /* being written */
    }
  }
  return entries;
}

/** The instanceId a newly started process registered with, waited for until `deadline`. */
async function registeredInstance(dir, others, deadline) {
  for (;;) {
    const mine = [...registryEntries(dir).values()].find((instance) => !others.has(instance));
    if (mine) return mine;
    if (Date.now() > deadline) throw new Error(`no entry of the new process appeared in the dev registry ${dir}`);
    await sleep(50);
  }
}

function forgetRegistryEntries(dir, instance) {
  for (const [name, owner] of registryEntries(dir)) if (owner === instance) rmSync(join(dir, name), { force: true });
}

// ---------------------------------------------------------------------------------------
// Mock model server (mock/model-server.mjs, written separately)

/** Start the mock model server if mock/model-server.mjs exists; null otherwise. */
export async function startMock({ port, timeoutMs = 15_000, args = [] } = {}) {
  if (!existsSync(MOCK_SERVER)) return null;
  port ??= await freePort();
  mkdirSync(ARTIFACTS, { recursive: true });
  const logFile = join(ARTIFACTS, `mock-${process.pid}-${port}.log`);
  const proc = spawnGroup(process.execPath, [MOCK_SERVER, '--port', String(port), ...args], { logFile });
  const end = Date.now() + timeoutMs;
  while (!(await portAccepts(port))) {
    if (proc.child.exitCode !== null || proc.child.signalCode !== null) {
      throw new Error(`mock model server exited early:\n${proc.output.slice(-3000)}`);
    }
    if (Date.now() > end) {
      await proc.kill();
      throw new Error(`mock model server did not listen on ${port} within ${timeoutMs} ms:\n${proc.output.slice(-3000)}`);
    }
    await sleep(50);
  }
  const url = `http://127.0.0.1:${port}`;
  const control = async (path) => {
    const res = await fetch(`${url}${path}`, { method: 'POST' });
    if (res.status !== 200) throw new Error(`mock model server: POST ${path} answered ${res.status} ${await res.text()}`);
  };
  return {
    port,
    url,
    logs: () => proc.output,
    /** The responses of `seed` stop before text token `at` until release(seed): mid-stream for as long as a test needs. */
    hold: (seed, at) => control(`/_mock/hold?seed=${seed}&at=${at}`),
    release: (seed) => control(`/_mock/release?seed=${seed}`),
    stop: () => proc.terminate(),
    kill: () => proc.kill(),
  };
}

// ---------------------------------------------------------------------------------------
// A minimal SSE reader over fetch (no reconnection: use the `eventsource` package for that).

/** `JSON.parse(raw)`, or undefined when it is not JSON. */
export function jsonOrUndefined(raw) {
  try {
    return JSON.parse(raw);
  } catch {
    return undefined;
  }
}

/**
 * The one SSE parser of the tests and benchmarks: the maintained `eventsource-parser` package
 * (what the AI SDK uses), an oracle written independently of the Worker's encoder. `push(text)`
 * any number of times; `emit` gets, in wire order, one { id, event, data, json } record per
 * event, one { retry } per `retry:` line, one { comment } per comment line and one
 * { invalid } per line the parser refused. `json: false` skips JSON.parse (benchmark readers).
 */
export function sseParser(emit, { json = true } = {}) {
  const parser = createParser({
    onEvent: ({ id, event, data }) => emit(json ? { id, event, data, json: jsonOrUndefined(data) } : { id, event, data }),
    onRetry: (retry) => emit({ retry }),
    onComment: (comment) => emit({ comment }),
    onError: (error) => emit({ invalid: error.message }),
  });
  return { push: (text) => parser.feed(text) };
}

/**
 * Open an SSE stream and return { status, headers, frames, arrivals, next(pred?, ms), attached, close(), done }.
 * `frames` fills with sseParser's records as they arrive (`arrivals[i]`: when frame i did, in
 * `performance.now()` ms); `next` resolves with the first unconsumed record matching pred
 * (default: any data record).
 */
export async function readSse(url, { headers = {}, signal } = {}) {
  const ctrl = new AbortController();
  signal?.addEventListener('abort', () => ctrl.abort(signal.reason));
  const res = await fetch(url, { headers: { accept: 'text/event-stream', ...headers }, signal: ctrl.signal });
  const frames = [];
  const arrivals = [];
  const waiters = new Set();
  let cursor = 0;
  let ended = false;
  let firstData;
  const attached = new Promise((resolve) => (firstData = resolve));
  const notify = () => {
    for (const w of waiters) w();
  };
  const done = (async () => {
    if (!res.body) return;
    const decoder = new TextDecoder();
    const parser = sseParser((record) => {
      frames.push(record);
      arrivals.push(performance.now());
      if (record.data !== undefined) firstData(record);
      notify();
    });
    try {
      for await (const chunk of res.body) parser.push(decoder.decode(chunk, { stream: true }));
    } catch (e) {
      if (!ctrl.signal.aborted) throw e;
    } finally {
      ended = true;
      firstData(undefined);
      notify();
    }
  })();
  done.catch(() => {});
  return {
    status: res.status,
    headers: res.headers,
    frames,
    arrivals,
    get ended() {
      return ended;
    },
    /** Resolves with the first data record (a subscription's `open`, or `absent`), or undefined if the body ended first. */
    attached,
    done,
    next(pred = (f) => f.data !== undefined, ms = 10_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          while (cursor < frames.length) {
            const f = frames[cursor++];
            if (pred(f)) {
              cleanup();
              return resolve(f);
            }
          }
          if (ended) {
            cleanup();
            reject(new Error(`SSE stream ended; frames so far: ${JSON.stringify(frames)}`));
          }
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`no matching SSE frame within ${ms} ms; frames so far: ${JSON.stringify(frames)}`));
        }, ms);
        const cleanup = () => {
          clearTimeout(timer);
          waiters.delete(check);
        };
        waiters.add(check);
        check();
      });
    },
    close() {
      ctrl.abort();
    },
  };
}

// ---------------------------------------------------------------------------------------
// Headless Chromium (Debian's /usr/bin/chromium driven by playwright-core).

export const CHROMIUM = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';

/**
 * Launch headless Chromium; close it with `await browser.close()`. A missing Chromium is an
 * error, never a skip: a browser test that did not run must not count as passed.
 */
export async function launchChromium(options = {}) {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`no Chromium at ${CHROMIUM}: install it (apt-get install chromium) or set CHROMIUM_BIN; browser tests never skip`);
  }
  const { chromium } = requireFromRoot('playwright-core');
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
    ...options,
  });
}

/**
 * Headless Chromium with one browser context for a test file: a 20 s default timeout, reduced
 * motion, a light color scheme, and every uncaught page error recorded in `pageErrors` (assert
 * it stays empty). Close it with `await session.close()`.
 */
export async function browserSession(contextOptions = {}) {
  const browser = await launchChromium();
  const context = await browser.newContext({ reducedMotion: 'reduce', colorScheme: 'light', ...contextOptions });
  context.setDefaultTimeout(20_000);
  const pageErrors = [];
  context.on('page', (page) => page.on('pageerror', (e) => pageErrors.push(`${page.url()}: ${e.message}`)));
  return { browser, context, pageErrors, close: () => browser.close() };
}
