#!/usr/bin/env node
// A Worker as `wrangler dev` would serve it, without the dev stack's cost of each request: the
// same wrangler.toml read by wrangler itself (`unstable_getMiniflareWorkerOptions`: bindings,
// Durable Objects, D1, vars), the same miniflare and workerd, the same persisted state, but the
// load reaches the user's Worker through a socket of its own (miniflare's `unsafeDirectSockets`)
// instead of through miniflare's entry Worker, and the bundle is not wrapped in wrangler's dev
// middleware. Those two cost ~1.04 M instructions and 550-620 us of CPU per request (the
// archived dev-overhead.mjs: docs/PERFORMANCE.md, "The research tools"), paid alike by both sides of
// a ratio, which pulls every one-POST-per-delta ratio toward 1; production has neither. Used by
// the benchmarks with `--bare` (tests/e2e/harness.mjs's startStack({ bare: true })), and by the
// hostile-traffic suites (tests/e2e/hostile.test.mjs, fuzz.test.mjs), which time denials the dev
// proxy would hold until the client's upload ends.
//
// Takes the subset of `wrangler dev`'s flags the harness passes:
//   node bench/bare-serve.mjs --ip 127.0.0.1 --port P [--inspector-port I] --persist-to DIR
//        [--env-file F] [--config wrangler.toml] [--script MODULE] [--var K:V ...]
// (`--script` stands for `wrangler dev`'s positional script: the module to serve instead of the
// config's `main`, such as the dev build.)
// and prints "Ready on http://IP:P" once the Worker answers there. The entry socket (through
// miniflare's entry Worker) is on a port of the system's choosing and is not used.
import { createServer } from 'node:net';
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve, sep } from 'node:path';
import { parseArgs } from 'node:util';
import { Log, LogLevel, Miniflare, convertV4MiniflareOptions } from 'miniflare';
import { unstable_getMiniflareWorkerOptions, unstable_readConfig } from 'wrangler';

const { values } = parseArgs({
  options: {
    ip: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string' },
    'inspector-port': { type: 'string' },
    'persist-to': { type: 'string' },
    'env-file': { type: 'string' },
    config: { type: 'string', default: 'wrangler.toml' },
    script: { type: 'string' },
    var: { type: 'string', multiple: true, default: [] },
  },
});
if (!values.port || !values['persist-to']) throw new Error('bare-serve: --port and --persist-to are required');

// workerd exits at once when the Worker's port is taken (miniflare throws "Address already in
// use", which the harness retries on with fresh ports), but hangs for ever when the inspector's
// port is: probe it first and fail the same way, so a port picked by freePort() and taken by
// another test in the meantime is retried instead of waited on.
if (values['inspector-port']) {
  const port = Number(values['inspector-port']);
  await new Promise((res) => {
    const probe = createServer().once('error', (e) => {
      console.error(`bare-serve: ${e.code === 'EADDRINUSE' ? 'Address already in use' : e.message} (inspector ${values.ip}:${port})`);
      process.exit(1);
    });
    probe.listen(port, values.ip, () => probe.close(res));
  });
}

const configPath = resolve(values.config);
const config = unstable_readConfig({ config: configPath });
// The env file, when given, replaces .dev.vars, as `wrangler dev --env-file` does.
const { workerOptions, main } = unstable_getMiniflareWorkerOptions(config, undefined, values['env-file'] ? { envFiles: [resolve(values['env-file'])] } : {});
// `wrangler dev --var K:V` sets string bindings over the config's [vars].
const cliVars = Object.fromEntries(values.var.map((kv) => [kv.slice(0, kv.indexOf(':')), kv.slice(kv.indexOf(':') + 1)]));

/**
 * The modules to serve: the main module and every module it reaches by a relative import
 * (worker-build's shim.mjs → ../index.js → ./index_bg.wasm), by extension: `.wasm` compiled
 * WebAssembly, the rest ES modules (worker-build's .js files are ES modules, which wrangler's
 * default rules would call CommonJS). miniflare 5 serves exactly the modules it is given: it takes
 * no module rules with a script path to find the rest by.
 */
function moduleGraph(mainPath) {
  const found = new Map();
  const visit = (path) => {
    if (found.has(path)) return;
    found.set(path, path.endsWith('.wasm') ? 'CompiledWasm' : 'ESModule');
    if (path.endsWith('.wasm')) return;
    for (const [, specifier] of readFileSync(path, 'utf8').matchAll(/\b(?:from|import)\s*['"](\.{1,2}\/[^'"]+)['"]/g)) {
      visit(resolve(dirname(path), specifier));
    }
  };
  visit(mainPath);
  // Module names are paths below the deepest directory holding them all.
  let modulesRoot = dirname(mainPath);
  while (![...found.keys()].every((path) => path.startsWith(`${modulesRoot}${sep}`))) modulesRoot = dirname(modulesRoot);
  return { modulesRoot, modules: [...found].map(([path, type]) => ({ type, path })) };
}

// miniflare 5 takes its options in a new shape; wrangler builds the 4.x shape and converts it
// (convertV4MiniflareOptions), as wrangler dev does.
const mf = new Miniflare(convertV4MiniflareOptions({
  host: values.ip,
  port: 0,
  ...(values['inspector-port'] ? { inspectorPort: Number(values['inspector-port']) } : {}),
  resourcePersistencePath: join(resolve(values['persist-to']), 'v3'), // where `wrangler dev --persist-to` keeps it
  log: new Log(LogLevel.INFO),
  workers: [
    {
      ...workerOptions,
      name: config.name,
      bindings: { ...workerOptions.bindings, ...cliVars },
      ...moduleGraph(values.script ? resolve(values.script) : isAbsolute(main) ? main : resolve(dirname(configPath), main)),
      unsafeDirectSockets: [{ host: values.ip, port: Number(values.port) }],
    },
  ],
}));
// Any other way workerd can fail to start without miniflare noticing ends here, with a message,
// rather than at the harness's own deadline.
const STARTUP_MS = 45_000;
const startupTimer = setTimeout(() => {
  console.error(`bare-serve: workerd did not start within ${STARTUP_MS} ms`);
  process.exit(1);
}, STARTUP_MS);
const url = await mf.unsafeGetDirectURL(config.name);
clearTimeout(startupTimer);
console.log(`Ready on ${url.origin}`);

const stop = () => mf.dispose().finally(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);

