// One module Worker served by workerd alone: no wrangler, no miniflare around it (no entry
// Worker, no request log, no dev proxy). For measuring what those add (bench/dev-overhead.mjs)
// and for checking the instruction meter on a known load (tests/e2e/instructions.test.mjs).
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

/**
 * Serves `source` (an ES module) with `command` (workerd itself, or a wrapper that execs it,
 * such as bench/workerd-callgrind.sh) on a free loopback port: { pid, url, stop }. The child's
 * pid is workerd's: the wrappers exec it in their own process.
 */
export async function serveAlone(source, { command = require('workerd').default } = {}) {
  const { serializeConfig } = require('miniflare');
  // Loaded here, not above: the harness reads the environment its stacks run with when it loads,
  // and bench/instructions.mjs sets that environment after its own imports.
  const { freePort } = await import('../tests/e2e/harness.mjs');
  const port = await freePort();
  const config = serializeConfig({
    services: [{ name: 'main', worker: { compatibilityDate: '2026-04-20', modules: [{ name: 'worker.mjs', esModule: source }] } }],
    sockets: [{ name: 'http', address: `127.0.0.1:${port}`, http: {}, service: { name: 'main' } }],
  });
  const child = spawn(command, ['serve', '--binary', '-'], { stdio: ['pipe', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  child.stdin.end(config);
  const url = `http://127.0.0.1:${port}`;
  for (const end = Date.now() + 120_000; ; ) {
    if (child.exitCode !== null) throw new Error(`workerd exited: ${stderr}`);
    if (await fetch(url).then((r) => r.arrayBuffer().then(() => true), () => false)) break;
    if (Date.now() > end) throw new Error(`workerd did not answer in 120 s: ${stderr}`);
    await new Promise((r) => setTimeout(r, 250));
  }
  return { pid: child.pid, url, stop: () => child.kill('SIGKILL') };
}
