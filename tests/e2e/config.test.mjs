// Bad configuration is refused, never ignored: the caller gets 500 `misconfigured` and a request
// id, the log names the setting under that id (a caller, authorized or not, learns nothing of the
// deployment); development-only switches stay off in a default configuration.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startStack } from './harness.mjs';
import { isLoggedError } from './util.mjs';

const cases = [
  { vars: { CHECKPOINT_CHARS: 'lots' }, names: 'CHECKPOINT_CHARS' },
  { vars: { PATH_PREFIX: 'streams/' }, names: 'PATH_PREFIX' },
  { vars: { COLUMNS: '{"body":"a\\"b"}' }, names: 'double quote' },
  { vars: { RETAIN_CHARS: '100' }, names: 'RETAIN_CHARS' },
  { vars: { TEST_FAULTS: 'rate=0.5;kinds=before' }, names: 'TEST_FAULTS' },
];

/** `fetch`'s answer as the util's checks take it. */
async function answer(res) {
  const raw = await res.text();
  return { status: res.status, headers: res.headers, raw, json: JSON.parse(raw) };
}

test('a bad configuration is refused with a request id, the setting named in the log only', async (t) => {
  for (const { vars, names } of cases) {
    const stack = await startStack({ vars });
    try {
      stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES ('m1', 'c1', 'assistant')`);
      const res = await fetch(`${stack.baseUrl}/streams/m1/open`, {
        method: 'POST',
        headers: { authorization: `Bearer ${stack.token('m1')}` },
      });
      await isLoggedError(stack, await answer(res), 500, 'misconfigured', [names], JSON.stringify(vars));
      // A caller without a token learns nothing either: the front Worker's 500 (a setting it
      // reads) or its 403 (a setting only the object reads, such as TEST_FAULTS).
      const anyone = await answer(await fetch(`${stack.baseUrl}/streams/m1/open`, { method: 'POST' }));
      assert.ok([500, 403].includes(anyone.status) && !anyone.raw.includes(names), `without a token: ${anyone.status} ${anyone.raw}`);
      assert.equal(stack.db.get(`SELECT status FROM messages WHERE id = 'm1'`).status, 'pending', 'nothing was written');
    } finally {
      await stack.stop();
    }
  }
});

test('the example secret of .dev.vars.example is refused outside development (the dev build with DEV_MODE=1)', async () => {
  const example = 'dev-secret-change-me';
  const stack = await startStack({ secret: example });
  try {
    stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES ('m1', 'c1', 'assistant')`);
    const open = () => fetch(`${stack.baseUrl}/streams/m1/open`, { method: 'POST', headers: { authorization: `Bearer ${stack.token('m1')}` } });
    await isLoggedError(stack, await answer(await open()), 500, 'misconfigured', ['STREAM_JWT_SECRET', 'example secret'], 'without DEV_MODE');
    await stack.restart({ vars: { DEV_MODE: '1' } });
    assert.equal((await open()).status, 200, 'accepted with DEV_MODE=1');
  } finally {
    await stack.stop();
  }
});

test('the development endpoints answer 404 unless DEV_MODE=1', async () => {
  const stack = await startStack({ vars: { DEV_MODE: '0' } });
  try {
    const res = await fetch(`${stack.baseUrl}/dev/session`, { method: 'POST', body: '{}' });
    assert.equal(res.status, 404);
    assert.equal((await res.json()).error, 'not_found');
  } finally {
    await stack.stop();
  }
});

test('the production build (what `wrangler deploy` bundles) has no development code, whatever its vars say', async () => {
  const stack = await startStack({ production: true, vars: { DEV_MODE: '1' } });
  try {
    const res = await fetch(`${stack.baseUrl}/dev/session`, { method: 'POST', body: '{}' });
    assert.equal(res.status, 404, 'no development endpoints, even with DEV_MODE=1');
    assert.equal((await res.json()).error, 'not_found');
    stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES ('m1', 'c1', 'assistant')`);
    const auth = { authorization: `Bearer ${stack.token('m1')}` };
    const open = await fetch(`${stack.baseUrl}/streams/m1/open`, { method: 'POST', headers: auth });
    assert.equal(open.status, 200, await open.text());
    const stats = await (await fetch(`${stack.baseUrl}/streams/m1/stats`, { headers: auth })).json();
    assert.equal(stats.state, 'Live', JSON.stringify(stats));
    assert.ok(!('wasmHeap' in stats) && !('faultsInjected' in stats), `no heap counter, no fault plan: ${JSON.stringify(stats)}`);

    await stack.restart({ vars: { TEST_FAULTS: 'rate=0.5;kinds=before' } });
    stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES ('m2', 'c1', 'assistant')`);
    const refused = await fetch(`${stack.baseUrl}/streams/m2/open`, { method: 'POST', headers: { authorization: `Bearer ${stack.token('m2')}` } });
    await isLoggedError(stack, await answer(refused), 500, 'misconfigured', ['TEST_FAULTS', 'test-faults'], 'refused, never ignored');
  } finally {
    await stack.stop();
  }
});
