// HS256 JWTs for rindle-streams (SPEC §4), node:crypto only. One implementation, used by
// scripts/mint-token.mjs (dev tokens) and tests/e2e/harness.mjs (tests, including
// deliberately bad tokens).
import { createHmac } from 'node:crypto';

const b64url = (value) =>
  Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');

/**
 * Mint a token. Claims: sub, stream (exact id or prefix ending in `*`), scope
 * (space-separated string or array), exp (seconds since epoch; default now + ttl).
 *
 * Knobs for bad tokens:
 *   alg: 'none'          → unsigned token (`header.payload.`)
 *   alg: anything else but 'HS256' → header says so, still HMAC-SHA256 signed
 *   exp: in the past     → expired;  exp: null → claim omitted
 *   secret: the wrong key → bad signature
 *   header / claims      → merged into the header / payload as given
 *   tamper: true         → payload changed after signing
 */
export function mintToken(
  { sub = 'dev', stream, scope = 'read write cancel', exp, ttl = 3600, alg = 'HS256', header = {}, claims = {}, tamper = false } = {},
  secret,
) {
  const payload = { sub, stream, scope: Array.isArray(scope) ? scope.join(' ') : scope };
  if (exp === undefined) payload.exp = Math.floor(Date.now() / 1000) + ttl;
  else if (exp !== null) payload.exp = exp;
  Object.assign(payload, claims);
  for (const k of Object.keys(payload)) if (payload[k] === undefined) delete payload[k];

  const head = b64url({ alg, typ: 'JWT', ...header });
  const body = b64url(payload);
  const signingInput = `${head}.${body}`;
  let sig = '';
  if (alg !== 'none') {
    if (typeof secret !== 'string' || secret === '') throw new Error('mintToken: a secret is required');
    sig = createHmac('sha256', secret).update(signingInput).digest('base64url');
  }
  if (tamper) return `${head}.${b64url({ ...payload, stream: '*', scope: 'read write cancel' })}.${sig}`;
  return `${signingInput}.${sig}`;
}

/** Decode without verifying (for assertions in tests). */
export function decodeToken(token) {
  const [h, p] = token.split('.');
  return {
    header: JSON.parse(Buffer.from(h, 'base64url').toString()),
    payload: JSON.parse(Buffer.from(p, 'base64url').toString()),
  };
}

/** Verify an HS256 token (for tests of the tooling itself). Returns the payload or throws. */
export function verifyToken(token, secret, now = Math.floor(Date.now() / 1000)) {
  const [h, p, s] = token.split('.');
  const { header, payload } = decodeToken(token);
  if (header.alg !== 'HS256') throw new Error(`bad alg ${header.alg}`);
  const want = createHmac('sha256', secret).update(`${h}.${p}`).digest('base64url');
  if (s !== want) throw new Error('bad signature');
  if (typeof payload.exp === 'number' && payload.exp <= now) throw new Error('expired');
  return payload;
}

/** Parse a dotenv-style file's text (KEY=VALUE, optional quotes, # comments). */
export function parseDotVars(text) {
  const out = {};
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const m = /^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$/.exec(line);
    if (!m) continue;
    let v = m[2];
    if (/^'.*'$/.test(v) || /^".*"$/.test(v)) v = v.slice(1, -1);
    out[m[1]] = v;
  }
  return out;
}
