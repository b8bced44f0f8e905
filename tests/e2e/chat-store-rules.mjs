// The example chat's store rules (examples/chat/store.js), by the page's own requests (no
// browser), on whatever database the stack runs: D1 (tests/browser/stock-chat.test.mjs) or
// Postgres (tests/e2e-pg/chat.test.mjs). The example never drops a message its client never showed:
//
// - a send from a tab that missed a turn keeps that turn (before: the send's `dropUnsent` deleted
//   every row the client did not send, so another browser's question and answer were gone);
// - a regeneration drops the answer it replaces, and only that;
// - a regeneration by a tab that has not shown a later turn is refused (409 history_changed) and
//   changes nothing;
// - an edit of an earlier question (the AI SDK's `messageId`) by a tab that showed everything drops
//   what followed the question and rewrites it.
import assert from 'node:assert/strict';
import { until, withTimeout } from './util.mjs';

/** Runs the rules on `stack` (a `chat: true` stack) whose model holds each answer on `hold`. */
export async function checkStoreRules({ stack, hold, chatId }) {
  const user = (id, text) => ({ id, role: 'user', parts: [{ type: 'text', text }] });
  const history = async () => {
    const res = await fetch(`${stack.baseUrl}/api/chat/${chatId}/messages`);
    return res.json();
  };
  const ids = async () => (await history()).messages.map((m) => m.id);
  /** The page's POST; a started answer is let go and awaited to its end. */
  async function post(body) {
    const last = body.messages.at(-1);
    hold.release(`commit-${last.id}`);
    hold.release(`start-${last.id}`);
    const res = await fetch(`${stack.baseUrl}/api/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id: chatId, ...body }) });
    const answer = await res.json();
    if (res.status === 200) {
      await withTimeout(hold.held(answer.streamId), 30_000, `the model of ${answer.streamId}`);
      hold.release(answer.streamId);
      await until(async () => (await history()).active === null, `${answer.streamId} to end`, 20_000);
    }
    return { status: res.status, answer };
  }
  const submit = (messages, extra = {}) => post({ trigger: 'submit-message', messages, ...extra });

  // Browser 1 asks; browser 2, opened before and never told, asks its own question.
  const u1 = user('rules-u1', 'From the laptop?');
  const a1 = (await submit([u1])).answer.streamId;
  const u2 = user('rules-u2', 'From the other browser?');
  const second = await submit([u2]);
  assert.equal(second.status, 200);
  const a2 = second.answer.streamId;
  assert.deepEqual(await ids(), [u1.id, a1, u2.id, a2], 'the turn the second browser never showed is kept');

  // A regeneration of a2 by a tab that showed it: a2 goes, the new answer follows u2.
  const regenerated = await post({ trigger: 'regenerate-message', messages: [u1, { id: a1 }, u2], seen: a2 });
  assert.equal(regenerated.status, 200, JSON.stringify(regenerated.answer));
  const a3 = regenerated.answer.streamId;
  assert.deepEqual(await ids(), [u1.id, a1, u2.id, a3], 'only the regenerated answer dropped');

  // Another turn, then a regeneration of a3 by a tab that showed only up to a3: refused.
  const u3 = user('rules-u3', 'And a third?');
  const a4 = (await submit([u1, { id: a1 }, u2, { id: a3 }, u3])).answer.streamId;
  const stale = await post({ trigger: 'regenerate-message', messages: [u1, { id: a1 }, u2], seen: a3 });
  assert.deepEqual([stale.status, stale.answer.error], [409, 'history_changed'], 'it would drop a turn the tab never showed');
  assert.deepEqual(await ids(), [u1.id, a1, u2.id, a3, u3.id, a4], 'nothing changed');

  // An edit of u2 by a tab that showed everything: a3, u3, a4 go; u2 is rewritten; a new answer.
  const edited = user(u2.id, 'Edited: from the other browser?');
  const edit = await submit([u1, { id: a1 }, edited], { messageId: u2.id, seen: a4 });
  assert.equal(edit.status, 200, JSON.stringify(edit.answer));
  const after = await history();
  assert.deepEqual(after.messages.map((m) => m.id), [u1.id, a1, u2.id, edit.answer.streamId]);
  assert.equal(after.messages[2].parts[0].text, edited.parts[0].text, 'the question rewritten');
}
