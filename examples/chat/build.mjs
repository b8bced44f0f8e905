// Builds the example chat's page into dist/: the React app bundled by esbuild (no CDN), with
// index.html and style.css. Skips the work when dist/ is newer than its sources.
//   node examples/chat/build.mjs [--force]
// scripts/build.sh and the test harness (startChatStack) run it, so a fresh clone needs no step.
import { copyFileSync, existsSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
export const DIST = join(HERE, 'dist');
const SOURCES = [join(HERE, 'page', 'main.jsx'), join(HERE, 'page', 'index.html'), join(HERE, 'page', 'style.css'), join(ROOT, 'public', 'chat-transport.js'), join(ROOT, 'public', 'chat-feed.js'), join(ROOT, 'public', 'ui-message.js'), join(ROOT, 'public', 'client.js'), join(HERE, 'build.mjs'), join(ROOT, 'package-lock.json')];
const STAMP = join(DIST, '.built');

export async function buildChatPage({ force = false } = {}) {
  const newest = Math.max(...SOURCES.map((f) => statSync(f).mtimeMs));
  if (!force && existsSync(STAMP) && statSync(STAMP).mtimeMs >= newest) return { built: false, dist: DIST };
  mkdirSync(DIST, { recursive: true });
  const esbuild = createRequire(join(ROOT, 'package.json'))('esbuild');
  // React's production build (app.js), and its development build (app.dev.js, ?react=development),
  // where StrictMode mounts every effect twice as it does in an app under development.
  for (const [outfile, mode] of [['app.js', 'production'], ['app.dev.js', 'development']]) {
    await esbuild.build({
      entryPoints: [join(HERE, 'page', 'main.jsx')],
      outfile: join(DIST, outfile),
      bundle: true,
      format: 'esm',
      jsx: 'automatic',
      minify: mode === 'production',
      target: ['chrome120', 'firefox120', 'safari17'],
      define: { 'process.env.NODE_ENV': JSON.stringify(mode) },
      logLevel: 'warning',
    });
  }
  copyFileSync(join(HERE, 'page', 'index.html'), join(DIST, 'index.html'));
  copyFileSync(join(HERE, 'page', 'style.css'), join(DIST, 'style.css'));
  writeFileSync(STAMP, new Date().toISOString()); // only its mtime matters
  return { built: true, dist: DIST };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { built } = await buildChatPage({ force: process.argv.includes('--force') });
  console.log(built ? `examples/chat: built ${DIST}` : 'examples/chat: dist/ is up to date');
}
