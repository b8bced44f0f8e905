#!/usr/bin/env node
// What the front Worker's authorization costs per request (SPEC §12: a token is verified
// before any object is reached). workerd's CPU (the scheduler's count) over batches of requests
// the front Worker answers itself, none reaching an object:
//
//   routed     GET an unknown route: 404 (routing only, the floor of every request)
//   no-token   GET /events without a token: 403 (routing, the question, no crypto)
//   first      GET /events with a token never seen (unique `exp`), valid but for another
//              stream: 403 after a full verification (base64, the header, HMAC-SHA256, the claims)
//   cached     GET /stats with one read token, again and again: 403 after the cached
//              verification (the token's SHA-256, a lookup, the claims checked against the request)
//
// The verification's cost is a scenario's CPU per request less `no-token`'s. Rounds alternate
// the scenarios, so the machine's drift falls on all of them; the medians are reported.
//
//   node bench/front-auth.mjs [--requests 2000] [--rounds 5]
//
// A bare stack of the production build (bench/bare-serve.mjs: the Worker's own socket, no dev
// proxy, the build `wrangler deploy` ships).
import http from 'node:http';
import { parseArgs } from 'node:util';
import { mintToken, startStack } from '../tests/e2e/harness.mjs';
import { processCpuMs, workerBase } from './bench.mjs';

const { values } = parseArgs({ options: { requests: { type: 'string', default: '2000' }, rounds: { type: 'string', default: '5' } } });
const REQUESTS = Number(values.requests);
const ROUNDS = Number(values.rounds);

const stack = await startStack({ name: 'bench-front-auth', bare: true, production: true });
try {
  const { pid } = await workerBase(stack);
  const { hostname, port } = new URL(stack.baseUrl);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const get = (path, headers = {}) =>
    new Promise((resolve, reject) => {
      http.get({ host: hostname, port, path, agent, headers }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode));
      }).on('error', reject);
    });
  const now = Math.floor(Date.now() / 1000);
  const cached = `Bearer ${stack.token('s1', 'read')}`;
  let unique = 0;
  const scenarios = {
    routed: () => get('/streams/s1/nope'),
    'no-token': () => get('/streams/s1/events'),
    first: () => get('/streams/s1/events', { authorization: `Bearer ${mintToken({ stream: 'other', scope: 'read', exp: now + 600 + ++unique }, stack.secret)}` }),
    cached: () => get('/streams/s1/stats', { authorization: cached }),
  };
  const expected = { routed: 404, 'no-token': 403, first: 403, cached: 403 };
  const perRequest = Object.fromEntries(Object.keys(scenarios).map((k) => [k, []]));
  for (const [name, ask] of Object.entries(scenarios)) for (let i = 0; i < 200; i++) await ask(); // warm
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, ask] of Object.entries(scenarios)) {
      const before = processCpuMs(pid);
      for (let i = 0; i < REQUESTS; i++) {
        const status = await ask();
        if (status !== expected[name]) throw new Error(`${name}: ${status}, expected ${expected[name]}`);
      }
      perRequest[name].push(((processCpuMs(pid) - before) * 1000) / REQUESTS);
    }
  }
  agent.destroy();
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const us = Object.fromEntries(Object.entries(perRequest).map(([k, xs]) => [k, Math.round(median(xs) * 10) / 10]));
  console.log(JSON.stringify({
    requests: REQUESTS,
    rounds: ROUNDS,
    cpuUsPerRequest: us,
    verificationUs: { first: Math.round((us.first - us['no-token']) * 10) / 10, cached: Math.round((us.cached - us['no-token']) * 10) / 10 },
  }));
} finally {
  await stack.stop();
}
