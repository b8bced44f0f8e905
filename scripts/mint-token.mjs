#!/usr/bin/env node
// Mint a dev token for the local server:
//   node scripts/mint-token.mjs <streamId|prefix*> ["read write cancel"] [--ttl SECONDS] [--sub NAME]
// The secret is $STREAM_JWT_SECRET, else STREAM_JWT_SECRET from .dev.vars (see .dev.vars.example).
import { readFileSync, existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { mintToken, parseDotVars } from './jwt.mjs';

const root = resolve(process.env.RINDLE_ROOT ?? join(dirname(fileURLToPath(import.meta.url)), '..'));
const args = process.argv.slice(2);
const opts = { ttl: 3600, sub: 'dev' };
const positional = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--ttl') opts.ttl = Number(args[++i]);
  else if (args[i] === '--sub') opts.sub = args[++i];
  else if (args[i] === '-h' || args[i] === '--help') opts.help = true;
  else positional.push(args[i]);
}
const [stream, scope = 'read write cancel'] = positional;
if (opts.help || !stream || !Number.isFinite(opts.ttl)) {
  console.error('usage: node scripts/mint-token.mjs <streamId|prefix*> ["read write cancel"] [--ttl SECONDS] [--sub NAME]');
  process.exit(2);
}

let secret = process.env.STREAM_JWT_SECRET;
if (!secret) {
  const file = join(root, '.dev.vars');
  if (!existsSync(file)) {
    console.error(`no STREAM_JWT_SECRET in the environment and no ${file} (run scripts/setup.sh)`);
    process.exit(1);
  }
  secret = parseDotVars(readFileSync(file, 'utf8')).STREAM_JWT_SECRET;
  if (!secret) {
    console.error(`${file} has no STREAM_JWT_SECRET`);
    process.exit(1);
  }
}
process.stdout.write(mintToken({ sub: opts.sub, stream, scope, ttl: opts.ttl }, secret) + '\n');
