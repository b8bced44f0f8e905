// The mock model server's background mode (mock/model-server.mjs), on its own: the stand-in for
// OpenAI's background responses that tests/e2e/pump-background.test.mjs (and the survival tests
// of issue 35) rely on. Every event numbered from 0 with no gap; a generation that goes on with
// nobody listening and waits for the test's release, never the clock; a replay after any event;
// a perturbed replay; expiry; cancel; and the record of what it saw.
import test from 'node:test';
import assert from 'node:assert/strict';
import { startMockServer } from '../../mock/model-server.mjs';
import { sseParser } from './harness.mjs';
import { until } from './util.mjs';
import { mockTokens } from '../../mock/mock-text.mjs';

let mock;
test.before(async () => {
  mock = await startMockServer({ port: 0 });
});
test.after(() => mock?.close());

const post = (path, body) =>
  fetch(`${mock.url}${path}`, { method: 'POST', headers: { authorization: 'Bearer k', 'content-type': 'application/json' }, body: body && JSON.stringify(body) });
const responses = async () => (await fetch(`${mock.url}/_mock/responses`)).json();
const view = async (tag) => (await responses()).find((g) => g.tag === tag);

/** Reads an SSE response to its end: the events' data, parsed. */
async function events(res) {
  const out = [];
  const parser = sseParser((r) => r.data !== undefined && out.push(r.json));
  const decoder = new TextDecoder();
  for await (const chunk of res.body) parser.push(decoder.decode(chunk, { stream: true }));
  return out;
}

const deltas = (evs) => evs.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta);
const create = (query) => post(`/v1/responses?${new URLSearchParams(query)}`, { stream: true, background: true });

test('a background generation goes on with nobody listening, held and released by the test, every event numbered without a gap', async () => {
  const tokens = mockTokens({ seed: 3, tokens: 12 });
  const res = await create({ tokens: 12, seed: 3, rate: 0, tag: 'held', holdAt: 5 });
  assert.equal(res.status, 200);
  await until(async () => (await view('held'))?.textTokens === 5, 'the generation to hold at token 5');
  await res.body.cancel(); // nobody listens any more
  assert.equal((await view('held')).status, 'in_progress');
  await post('/_mock/release?tag=held&until=9');
  await until(async () => (await view('held'))?.textTokens === 9, 'the generation to go on to token 9 with no listener');
  await post('/_mock/release?tag=held');
  await until(async () => (await view('held'))?.status === 'completed', 'the generation to complete');
  const g = await view('held');
  assert.equal(g.text, tokens.join(''));

  // A re-attach from the start replays everything, numbered 0, 1, 2, … with no gap.
  const all = await events(await fetch(`${mock.url}/v1/responses/${g.id}?stream=true`));
  assert.deepEqual(all.map((e) => e.sequence_number), all.map((_, i) => i));
  assert.deepEqual(all.slice(0, 3).map((e) => e.type), ['response.created', 'response.queued', 'response.in_progress']);
  assert.equal(all[0].response.id, g.id);
  assert.equal(all.at(-1).type, 'response.completed');
  assert.deepEqual(deltas(all), tokens);
  // After N: exactly the events after N.
  const after = await events(await fetch(`${mock.url}/v1/responses/${g.id}?stream=true&starting_after=7`));
  assert.deepEqual(after, all.slice(8));
  assert.equal((await fetch(`${mock.url}/v1/responses/${g.id}?stream=true&starting_after=x`)).status, 400);
  // The stored response.
  const stored = await (await fetch(`${mock.url}/v1/responses/${g.id}`)).json();
  assert.equal(stored.status, 'completed');
  assert.equal(stored.output.find((o) => o.type === 'message').content[0].text, tokens.join(''));
  const seen = await view('held');
  assert.deepEqual(seen.reattaches, [{ startingAfter: null, perturbed: false }, { startingAfter: 7, perturbed: false }]);
  assert.equal(seen.retrieves, 1);
});

test('a perturbed replay differs from the original from token K on; expiry refuses the replay, then the response', async () => {
  const tokens = mockTokens({ seed: 4, tokens: 10 });
  const original = await events(await create({ tokens: 10, seed: 4, rate: 0, tag: 'perturb' }));
  assert.deepEqual(deltas(original), tokens);
  const { id } = await view('perturb');
  await post('/_mock/perturb?tag=perturb&at=6');
  const replay = await events(await fetch(`${mock.url}/v1/responses/${id}?stream=true`));
  assert.deepEqual(deltas(replay), tokens.map((t, i) => (i >= 6 ? `≠${t}` : t)));
  assert.deepEqual(replay.map((e) => e.sequence_number), original.map((e) => e.sequence_number), 'the same events, numbered alike');

  await post('/_mock/expire?tag=perturb');
  assert.equal((await fetch(`${mock.url}/v1/responses/${id}?stream=true`)).status, 404);
  assert.equal((await fetch(`${mock.url}/v1/responses/${id}`)).status, 200, 'the stored response outlives the replay');
  await post('/_mock/expire?tag=perturb&what=response');
  assert.equal((await fetch(`${mock.url}/v1/responses/${id}`)).status, 404);
});

test('a cancel stops the generation and ends its streams; stall keeps the create socket open and silent until a drop', async () => {
  const res = await create({ tokens: 50, seed: 5, rate: 0, tag: 'cancel', holdAt: 10 });
  const streamed = events(res);
  await until(async () => (await view('cancel'))?.textTokens === 10, 'the hold');
  const { id } = await view('cancel');
  const answer = await (await post(`/v1/responses/${id}/cancel`)).json();
  assert.equal(answer.status, 'cancelled');
  assert.equal(deltas(await streamed).length, 10, 'the create stream ended at the cancel');
  await post('/_mock/release?tag=cancel');
  const g = await view('cancel');
  assert.deepEqual([g.status, g.textTokens, g.cancels], ['cancelled', 10, 1], 'a release after a cancel produces nothing');
  assert.equal((await (await post(`/v1/responses/${id}/cancel`)).json()).status, 'cancelled', 'idempotent');

  const stalled = await create({ tokens: 20, seed: 6, rate: 0, tag: 'stall', fail: 'stall', failAt: 5 });
  const got = events(stalled).catch((e) => e);
  await until(async () => (await view('stall'))?.status === 'completed', 'the generation to complete past the stall');
  await post('/_mock/drop?tag=stall');
  assert.ok((await got) instanceof Error, 'the stalled socket was destroyed, not ended');
  const requests = await (await fetch(`${mock.url}/_mock/requests`)).json();
  const kinds = requests.filter((r) => r.responseId === id).map((r) => r.kind);
  assert.deepEqual(kinds, ['create', 'cancel', 'cancel']);
});
