// Every error row of SPEC §4 against the real runtime, each its own test: open refusals,
// not_open, closed, bad_utf8, too_large, checkpoint_failed, seal_failed, every kind of bad
// token (one identical 403 whether or not the stream exists), and bad routes.
// Store failures are real database failures: a trigger aborts the Worker's write (SQLite's on
// the local D1 file; PL/pgSQL's on the Postgres backend, RINDLE_E2E_BACKEND=postgres), scoped to
// the one stream under test and dropped afterwards.
import test from 'node:test';
import assert from 'node:assert/strict';
import { mintToken, startMock, startStack } from './harness.mjs';
import { pump } from './pump-helpers.mjs';
import { api, call, checkFrames, isError, newStream, ok, rows, until, untilEnd } from './util.mjs';

let stack;

test.before(async () => {
  stack = await startStack({ name: 'e2e-errors' });
});
test.after(async () => {
  await stack?.stop();
});

/**
 * Run `fn` with a trigger that aborts every `event` (INSERT, UPDATE) on `table` for which `when`
 * holds (SQL both dialects read: quote camel-case columns); always drops it.
 */
async function withTrigger(name, { event, table, when }, fn) {
  const message = `e2e: injected failure (${name})`;
  const postgres = stack.backend === 'postgres';
  const drop = postgres ? `DROP TRIGGER IF EXISTS "${name}" ON ${table}` : `DROP TRIGGER IF EXISTS "${name}"`;
  const create = postgres
    ? `CREATE OR REPLACE FUNCTION "${name}"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '${message}'; END $$;
       CREATE TRIGGER "${name}" BEFORE ${event} ON ${table} FOR EACH ROW WHEN (${when}) EXECUTE FUNCTION "${name}"();`
    : `CREATE TRIGGER "${name}" BEFORE ${event} ON ${table} WHEN ${when} BEGIN SELECT RAISE(ABORT, '${message}'); END;`;
  stack.db.exec(`${drop}; ${create}`);
  try {
    return await fn();
  } finally {
    stack.db.exec(drop);
  }
}

// ---------------------------------------------------------------------------------------
// open

test('open refused: no message row → 409 open_refused', { timeout: 60_000 }, async () => {
  const id = 'open-missing-row';
  const s = api(stack, id);
  isError(await s.open(), 409, 'open_refused', 'open without a row');
  assert.equal(rows(stack, id).row, undefined, 'no row was created');
  isError(await s.append('x'), 404, 'not_open', 'append after a refused open');
});

test('open refused: row already advanced (seq non-zero) → 409 open_refused, row untouched', { timeout: 60_000 }, async () => {
  const id = newStream(stack, 'open-advanced');
  stack.db.run(`UPDATE messages SET seq = 5, body = 'hello', status = 'complete' WHERE id = ?`, id);
  const before = rows(stack, id).row;
  isError(await api(stack, id).open(), 409, 'open_refused', 'open of an advanced row');
  assert.deepEqual(rows(stack, id).row, before);
});

test('open refused: row already streaming → 409 open_refused, row untouched', { timeout: 60_000 }, async () => {
  const id = newStream(stack, 'open-streaming');
  stack.db.run(`UPDATE messages SET status = 'streaming', host = 'someone-else' WHERE id = ?`, id);
  const before = rows(stack, id).row;
  isError(await api(stack, id).open(), 409, 'open_refused', 'open of a streaming row');
  assert.deepEqual(rows(stack, id).row, before);
});

test('open refused: already open here → 409 open_refused, the live stream carries on', { timeout: 60_000 }, async () => {
  const id = newStream(stack, 'open-twice');
  const s = api(stack, id);
  ok(await s.open(), 'first open');
  ok(await s.append('abc'), 'append');
  isError(await s.open(), 409, 'open_refused', 'second open');
  const rec = ok(await s.append('def'), 'append after the refused second open');
  assert.equal(rec.seq, 6);
  const closed = ok(await s.close(), 'close');
  assert.equal(closed.seq, 6);
  assert.equal(rows(stack, id).row.body, 'abcdef');
});

test('open succeeds once the row exists, after an open was refused for a missing row', { timeout: 60_000 }, async () => {
  const id = `open-late-row-${Date.now()}`;
  const s = api(stack, id);
  isError(await s.open(), 409, 'open_refused', 'open before the row exists');
  stack.db.run(`INSERT INTO messages (id, chat_id, role) VALUES (?, 'c1', 'assistant')`, id);
  ok(await s.open(), 'open after the row was inserted');
  ok(await s.append('ok'), 'append');
  ok(await s.close(), 'close');
  assert.equal(rows(stack, id).row.body, 'ok');
});

test('concurrent opens of one stream: exactly one wins, the others are 409 open_refused', { timeout: 60_000 }, async () => {
  const id = newStream(stack, 'open-race');
  const s = api(stack, id);
  const answers = await Promise.all(Array.from({ length: 5 }, () => s.open()));
  const statuses = answers.map((a) => a.status).sort();
  assert.deepEqual(statuses, [200, 409, 409, 409, 409], answers.map((a) => a.raw).join('\n'));
  for (const a of answers.filter((x) => x.status === 409)) assert.equal(a.json.error, 'open_refused');
  ok(await s.append('one producer'), 'append');
  ok(await s.close(), 'close');
  assert.equal(rows(stack, id).row.body, 'one producer');
});

// ---------------------------------------------------------------------------------------
// append / flush / close

test('append to a stream never opened → 404 not_open (flush and close too)', { timeout: 60_000 }, async () => {
  const id = newStream(stack, 'never-opened');
  const s = api(stack, id);
  isError(await s.append('x'), 404, 'not_open', 'append');
  isError(await s.flush(), 404, 'not_open', 'flush');
  isError(await s.close(), 404, 'not_open', 'close');
  const { row, chunks } = rows(stack, id);
  assert.deepEqual([row.status, row.seq, row.body, chunks.length], ['pending', 0, '', 0], 'nothing was written');
});

test('append after close → 409 closed (and after fail)', { timeout: 60_000 }, async () => {
  const s = api(stack, newStream(stack, 'after-close'));
  ok(await s.open(), 'open');
  ok(await s.append('done'), 'append');
  ok(await s.close(), 'close');
  isError(await s.append('more'), 409, 'closed', 'append after close');
  assert.equal(rows(stack, s.id).row.body, 'done');

  const f = api(stack, newStream(stack, 'after-fail'));
  ok(await f.open(), 'open');
  ok(await f.fail('boom'), 'fail');
  isError(await f.append('more'), 409, 'closed', 'append after fail');
});

test('append of invalid UTF-8 → 400 bad_utf8; the row, the chunks and the stream are unchanged', { timeout: 60_000 }, async () => {
  const s = api(stack, newStream(stack, 'bad-utf8'));
  ok(await s.open(), 'open');
  ok(await s.append('good 😀'), 'append');
  ok(await s.flush(), 'flush');
  const reader = await s.events(0);
  await reader.next((f) => f.json?.type === 'chunk');
  const before = rows(stack, s.id);
  const statsBefore = ok(await s.stats(), 'stats');
  const bad = [
    Buffer.from([0x61, 0xff, 0x62]), // a byte that is never UTF-8
    Buffer.from([0x61, 0xc3]), // truncated 2-byte sequence
    Buffer.from([0xed, 0xa0, 0x80]), // an encoded surrogate (CESU-8)
    Buffer.from([0xc0, 0xaf]), // overlong '/'
    Buffer.concat([Buffer.from('valid prefix '), Buffer.from([0xf0, 0x9f, 0x98])]), // ends mid-emoji
  ];
  for (const bytes of bad) {
    const res = await s.append(bytes);
    isError(res, 400, 'bad_utf8', `append ${bytes.toString('hex')}`);
  }
  assert.deepEqual(rows(stack, s.id), before, 'row and chunk rows unchanged');
  const statsAfter = ok(await s.stats(), 'stats');
  assert.equal(statsAfter.seq, statsBefore.seq, 'nothing was pushed');
  assert.equal(ok(await s.text(), '/text').text, 'good 😀');
  // The stream is still usable and readers saw nothing of the bad bodies.
  assert.equal(ok(await s.append('!'), 'append after').seq, 8);
  ok(await s.close(), 'close');
  const got = checkFrames(await untilEnd(reader), 'reader');
  assert.equal(got.text, 'good 😀!');
});

test('U+0000 in a text append: refused 400 bad_text on Postgres (its text cannot hold it), nothing pushed; stored as sent on D1', { timeout: 30_000 }, async () => {
  const s = api(stack, newStream(stack, 'nul'));
  ok(await s.open(), 'open');
  ok(await s.append('before '), 'append');
  ok(await s.flush(), 'flush');
  const res = await s.append('a\u0000b');
  if (stack.backend === 'postgres') {
    const body = isError(res, 400, 'bad_text', 'append holding U+0000');
    assert.equal(body.seq, 7, 'the seq before the refused append');
    assert.equal(ok(await s.stats(), 'stats').seq, 7, 'nothing was pushed');
    ok(await s.append('after'), 'the stream goes on');
    ok(await s.close(), 'close');
    assert.equal(rows(stack, s.id).row.body, 'before after');
  } else {
    ok(res, 'append holding U+0000');
    ok(await s.close(), 'close');
    assert.equal(ok(await s.text(), '/text').text, 'before a\u0000b');
  }
});

test('U+0000 a producer cannot be told to fix (a fail\'s error, pumped text): U+FFFD in its place on Postgres, the seal commits; kept as sent on D1', { timeout: 30_000 }, async (t) => {
  const postgres = stack.backend === 'postgres';
  const nul = postgres ? '\uFFFD' : '\u0000';
  const failed = api(stack, newStream(stack, 'nul-fail'));
  ok(await failed.open(), 'open');
  ok(await failed.append('so far'), 'append');
  const sealed = ok(await failed.fail('bad\u0000thing'), 'fail with U+0000 in its error');
  assert.deepEqual([sealed.status, sealed.durableSeq], ['error', 6], 'the seal committed');
  // Read back through the Worker (/text): the tests' own SQLite reader (node:sqlite) cuts a
  // string at U+0000.
  const stored = ok(await failed.text(), '/text');
  assert.deepEqual([stored.status, stored.text, stored.error], ['error', 'so far', `bad${nul}thing`]);

  const mock = await startMock();
  t.after(() => mock.stop());
  const pumped = api(stack, newStream(stack, 'nul-pump'));
  ok(await pumped.open(), 'open');
  const url = `${mock.url}/v1/chat/completions?tokens=5&rate=0&nul=1`;
  const started = await pump(pumped, { format: 'openai-chat', url, body: { model: 'mock', stream: true, messages: [] } });
  assert.equal(started.status, 202, started.raw);
  await until(() => rows(stack, pumped.id).row.status !== 'streaming' && rows(stack, pumped.id).row.status, 'the pump sealed the row');
  const after = ok(await pumped.text(), '/text');
  assert.equal(after.status, 'complete', `the pump completed: ${after.error}`);
  assert.ok(after.text.startsWith(nul) && !after.text.slice(1).includes('\u0000'), JSON.stringify(after.text.slice(0, 20)));
});

test('append over MAX_APPEND_BYTES → 413 too_large, nothing pushed', { timeout: 30_000 }, async () => {
  const s = api(stack, newStream(stack, 'too-large'));
  ok(await s.open(), 'open');
  ok(await s.append('small'), 'append');
  const res = await s.append('x'.repeat(1048576 + 1));
  const body = isError(res, 413, 'too_large', 'append of MAX_APPEND_BYTES + 1');
  assert.equal(body.maxBytes, 1048576);
  // Multibyte: under the limit in UTF-16 units, over it in bytes.
  isError(await s.append('😀'.repeat(262145)), 413, 'too_large', 'append of 262145 emoji (1048580 bytes)');
  const stats = ok(await s.stats(), 'stats');
  assert.equal(stats.seq, 5, 'nothing of the refused bodies was pushed');
  ok(await s.close(), 'close');
  assert.equal(rows(stack, s.id).row.body, 'small');
});

test('flush when the checkpoint cannot commit → 503 checkpoint_failed with seq and durableSeq; recovers after', { timeout: 30_000 }, async () => {
  const id = newStream(stack, 'ckpt-fail');
  const s = api(stack, id);
  ok(await s.open(), 'open');
  ok(await s.append('durable '), 'append');
  assert.equal(ok(await s.flush(), 'flush').durableSeq, 8);
  const trigger = { event: 'INSERT', table: 'message_chunks', when: `NEW."streamId" = '${id}'` };
  await withTrigger('e2e_fail_chunks', trigger, async () => {
    ok(await s.append('stuck 🧱'), 'append');
    const res = await s.flush();
    const body = isError(res, 503, 'checkpoint_failed', 'flush with D1 refusing chunk rows');
    assert.equal(body.seq, 16);
    assert.equal(body.durableSeq, 8);
    assert.equal(rows(stack, id).row.seq, 8, 'the row did not advance');
    const stats = ok(await s.stats(), 'stats');
    assert.ok(stats.failures >= 1, `failures counted: ${JSON.stringify(stats)}`);
  });
  const again = ok(await s.flush(), 'flush after D1 recovers');
  assert.equal(again.durableSeq, 16);
  assert.equal(ok(await s.text(), '/text').text, 'durable stuck 🧱');
  ok(await s.close(), 'close');
});

test('close when the seal cannot commit → 503 seal_failed with seq and durableSeq; readers still get end', { timeout: 30_000 }, async () => {
  const id = newStream(stack, 'seal-fail');
  const s = api(stack, id);
  ok(await s.open(), 'open');
  ok(await s.append('kept'), 'append');
  ok(await s.flush(), 'flush');
  ok(await s.append(' lost'), 'append');
  const reader = await s.events(0);
  await reader.next((f) => f.json?.type === 'chunk');
  const trigger = { event: 'UPDATE', table: 'messages', when: `NEW.id = '${id}' AND NEW.status <> 'streaming'` };
  await withTrigger('e2e_fail_seal', trigger, async () => {
    const res = await s.close();
    const body = isError(res, 503, 'seal_failed', 'close with D1 refusing the seal');
    assert.equal(body.seq, 9);
    assert.ok(body.durableSeq >= 4 && body.durableSeq <= 9, `durableSeq ${body.durableSeq}`);
    const got = checkFrames(await untilEnd(reader, 10_000), 'reader');
    assert.ok(got.end, 'the stream still ends');
    assert.equal(got.end.seq, body.durableSeq, 'end carries the durable length, never more');
    assert.equal(rows(stack, id).row.status, 'streaming', 'the seal did not commit');
    isError(await s.append('x'), 409, 'closed', 'append after a failed seal');
  });
});

// ---------------------------------------------------------------------------------------
// Authorization

const BAD_TOKENS = {
  missing: () => null,
  'wrong key': (id) => mintToken({ stream: id, scope: 'read write cancel' }, 'not-the-secret-0123456789abcdef'),
  'wrong scope': (id) => mintToken({ stream: id, scope: 'nothing-useful' }),
  'wrong stream': (id) => mintToken({ stream: `${id}-other`, scope: 'read write cancel' }),
  'wrong stream prefix': (id) => mintToken({ stream: `zz-${id}*`, scope: 'read write cancel' }),
  expired: (id) => mintToken({ stream: id, scope: 'read write cancel', exp: Math.floor(Date.now() / 1000) - 60 }),
  'alg none': (id) => mintToken({ stream: id, scope: 'read write cancel', alg: 'none' }),
  'alg HS512 header': (id) => mintToken({ stream: id, scope: 'read write cancel', alg: 'HS512' }),
  tampered: (id) => mintToken({ stream: `${id}-other`, scope: 'read', tamper: true }),
  garbage: () => 'not.a.jwt',
};

const ROUTES = [
  ['POST', 'open'],
  ['POST', 'append', 'text'],
  ['POST', 'flush'],
  ['POST', 'close'],
  ['POST', 'fail', '{"error":"x"}'],
  ['POST', 'cancel'],
  ['GET', 'stats'],
  ['GET', 'watch'],
  ['GET', 'events'],
  ['GET', 'ui'],
  ['GET', 'text'],
];

/** Ask `route` of stream `id` with `token` (Bearer for producer routes, ?token= for reader routes). */
async function ask(id, [method, action, body], token) {
  const reader = action === 'events' || action === 'ui' || action === 'text';
  const q = reader && token !== null ? `?token=${encodeURIComponent(token)}` : '';
  const headers = !reader && token !== null ? { authorization: `Bearer ${token}` } : {};
  return call(`${stack.baseUrl}/streams/${id}/${action}${q}`, { method, headers, body });
}


for (const [kind, make] of Object.entries(BAD_TOKENS)) {
  test(`bad token (${kind}) → 403 forbidden with the same body on every route, nothing touched`, { timeout: 60_000 }, async () => {
    // A live stream with text, so a leak of any kind would show.
    const id = newStream(stack, `auth-${kind.replace(/\W+/g, '-')}`);
    const s = api(stack, id);
    ok(await s.open(), 'open');
    ok(await s.append('secret'), 'append');
    ok(await s.flush(), 'flush'); // durable now: no checkpoint of its own lands during the test
    const before = rows(stack, id);
    const bodies = new Set();
    for (const route of ROUTES) {
      // Wrong scope: a token with every scope but the one the route needs is also denied.
      const res = await ask(id, route, make(id));
      assert.equal(res.status, 403, `${kind} ${route[1]}: ${res.status} ${res.raw}`);
      assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
      bodies.add(res.raw);
    }
    assert.equal(bodies.size, 1, `one body for every route: ${[...bodies].join(' | ')}`);
    const body = JSON.parse([...bodies][0]);
    assert.deepEqual(Object.keys(body).sort(), ['error', 'message']);
    assert.equal(body.error, 'forbidden');
    assert.ok(!body.message.includes(id), 'the message does not name the stream');
    assert.deepEqual(rows(stack, id), before, 'nothing was written');
    const stats = ok(await s.stats(), 'stats');
    assert.equal(stats.seq, 6, 'the stream is untouched');
    assert.equal(stats.state, 'Live');
    ok(await s.close(), 'close');
  });
}

test('a token with one scope is denied the routes of the others', { timeout: 60_000 }, async () => {
  const id = newStream(stack, 'auth-scopes');
  const s = api(stack, id);
  ok(await s.open(), 'open');
  const tok = (scope) => mintToken({ stream: id, scope });
  for (const route of ROUTES) {
    const need = ['events', 'ui', 'text'].includes(route[1]) ? 'read' : route[1] === 'cancel' ? 'cancel' : 'write';
    for (const scope of ['read', 'write', 'cancel'].filter((x) => x !== need)) {
      const res = await ask(id, route, tok(scope));
      assert.equal(res.status, 403, `${route[1]} with scope ${scope}: ${res.status} ${res.raw}`);
      assert.equal(JSON.parse(res.raw).error, 'forbidden');
    }
  }
  // A prefix claim covers the stream; a read token works in the header as well.
  const prefix = mintToken({ stream: `${id.slice(0, 8)}*`, scope: 'read' });
  assert.equal((await ask(id, ['GET', 'text'], prefix)).status, 200);
  assert.equal((await call(`${stack.baseUrl}/streams/${id}/text`, { headers: { authorization: `Bearer ${prefix}` } })).status, 200);
  ok(await s.close(), 'close');
});

test('a denial is byte-identical for an existing stream and a missing one (status, headers, body)', { timeout: 60_000 }, async () => {
  const live = newStream(stack, 'exists');
  const s = api(stack, live);
  ok(await s.open(), 'open');
  ok(await s.append('here'), 'append');
  const sealed = newStream(stack, 'exists-sealed');
  const z = api(stack, sealed);
  ok(await z.open(), 'open');
  ok(await z.close(), 'close');
  const rowOnly = newStream(stack, 'exists-row-only');
  const missing = `missing-${Date.now()}`;
  const allBodies = new Set();
  for (const [kind, make] of Object.entries(BAD_TOKENS)) {
    for (const route of ROUTES) {
      const answers = [];
      for (const id of [live, sealed, rowOnly, missing]) {
        const res = await ask(id, route, make(id));
        answers.push({ id, status: res.status, type: res.headers.get('content-type'), raw: res.raw });
      }
      const [a, ...rest] = answers;
      allBodies.add(a.raw);
      assert.equal(a.status, 403, `${kind} ${route[1]}: ${JSON.stringify(a)}`);
      for (const b of rest) {
        assert.deepEqual({ status: b.status, type: b.type, raw: b.raw }, { status: a.status, type: a.type, raw: a.raw }, `${kind} ${route[1]}: ${a.id} vs ${b.id}`);
      }
    }
  }
  assert.equal(allBodies.size, 1, `one denial body for every kind of bad token and every route: ${[...allBodies].join(' | ')}`);
  assert.equal(rows(stack, missing).row, undefined, 'probing a missing stream created nothing');
  ok(await s.close(), 'close');
});

// ---------------------------------------------------------------------------------------
// Routes

test('unknown routes are 404 JSON, a wrong method is 405 JSON with Allow, a bad stream id is 400', { timeout: 60_000 }, async () => {
  const tok = stack.token('r1');
  const h = { authorization: `Bearer ${tok}` };
  for (const path of ['/streams/r1/nope', '/streams/r1', '/streams/', '/nope', '/streams/r1/open/extra']) {
    const res = await call(`${stack.baseUrl}${path}`, { method: 'POST', headers: h });
    assert.ok(res.status === 404 || (path.endsWith('/extra') && res.status === 400), `${path}: ${res.status} ${res.raw}`);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/, path);
    assert.ok(['not_found', 'bad_stream_id'].includes(res.json?.error), `${path}: ${res.raw}`);
  }
  for (const [method, action, allow] of [['GET', 'open', 'POST'], ['PUT', 'append', 'POST'], ['POST', 'events', 'GET'], ['DELETE', 'text', 'GET'], ['POST', 'stats', 'GET']]) {
    const res = await call(`${stack.baseUrl}/streams/r1/${action}`, { method, headers: h });
    isError(res, 405, 'method_not_allowed', `${method} ${action}`);
    assert.equal(res.headers.get('allow'), allow, `${method} ${action}: Allow`);
  }
  for (const id of ['a%00b', 'a%2Fb', 'a..b', '.hidden', 'x%27--', 'a%20b', 'é', 'a'.repeat(129)]) {
    isError(await call(`${stack.baseUrl}/streams/${id}/open`, { method: 'POST', headers: h }), 400, 'bad_stream_id', id);
  }
});

// ---------------------------------------------------------------------------------------
// Refusals that leave the request body unread must not disturb the next request (workerd
// throws "Can't read from request stream after response has been sent" when a Durable Object
// answers before the body piped into it was read: cloudflare/workerd#918).

test('a refusal that leaves the body unread does not disturb the next request (403, 404, 409, 413, bad route)', { timeout: 120_000 }, async () => {
  const s = api(stack, newStream(stack, 'unread-body'));
  ok(await s.open(), 'open');
  const victim = await s.events(0); // a reader that must not notice anything either
  await victim.next((f) => f.json?.type === 'open');
  const closed = api(stack, newStream(stack, 'unread-closed'));
  ok(await closed.open(), 'open');
  ok(await closed.close(), 'close');
  const neverOpened = api(stack, newStream(stack, 'unread-never'));
  const refusals = {
    '403 append without a token': () => call(`${stack.baseUrl}/streams/${s.id}/append`, { method: 'POST', body: 'attack' }),
    '404 not_open append': () => neverOpened.append('early'),
    '409 closed append': () => closed.append('late'),
    '413 too_large append': () => s.append('x'.repeat(1048577)),
    '403 streaming append without a token': () =>
      call(`${stack.baseUrl}/streams/${s.id}/append`, {
        method: 'POST',
        duplex: 'half',
        body: new ReadableStream({
          async pull(c) {
            c.enqueue(new TextEncoder().encode('piece'));
            await new Promise((r) => setTimeout(r, 20));
            c.close();
          },
        }),
      }),
    '400 bad stream id with a body': () => call(`${stack.baseUrl}/streams/bad%20id/append`, { method: 'POST', headers: { authorization: `Bearer ${s.token}` }, body: 'x' }),
    '404 unknown route with a body': () => call(`${stack.baseUrl}/nope`, { method: 'POST', body: 'x' }),
    '405 wrong method with a body': () => call(`${stack.baseUrl}/streams/${s.id}/events`, { method: 'POST', body: 'x' }),
  };
  const uncaught = () => (stack.logs().match(/Can't read from request stream after response has been sent/g) ?? []).length;
  const before = uncaught();
  const failures = [];
  for (const [kind, refuse] of Object.entries(refusals)) {
    for (let i = 0; i < 8; i++) {
      const refused = await refuse();
      assert.ok(refused.status >= 400 && refused.status < 500, `${kind}: ${refused.status} ${refused.raw}`);
      // The bug made the next request hang for good (or fail at once): the bound only ends the wait.
      let next;
      try {
        const res = await fetch(s.url('stats'), { headers: { authorization: `Bearer ${s.token}` }, signal: AbortSignal.timeout(15_000) });
        next = { status: res.status, body: (await res.text()).slice(0, 120) };
      } catch (e) {
        next = { status: 'no answer within 15 s', body: String(e) };
      }
      if (next.status !== 200) failures.push({ kind, iteration: i, ...next });
    }
  }
  assert.deepEqual(failures, [], 'the request after a refusal failed');
  assert.equal(uncaught() - before, 0, 'workerd logged "Can\'t read from request stream after response has been sent"');
  assert.equal(ok(await s.stats(), 'stats').seq, 0, 'none of the refused bodies was pushed');
  ok(await s.append('still fine'), 'append');
  ok(await s.close(), 'close');
  assert.equal(checkFrames(await untilEnd(victim), 'victim').text, 'still fine');
});
