// Helpers for tests of the example chat page (examples/chat/page/main.jsx) in Chromium: what the
// page renders, and the source it must equal (the scripted answer built by the AI SDK itself).
import assert from 'node:assert/strict';
import { readUIMessageStream } from 'ai';
import { seedOf, streamAnswer, uiStreamOptions } from '../../examples/chat/answer.js';

/** The scripted answer to `question`, as the AI SDK builds its message from the producer's chunks. */
export async function sourceMessage(answerId, question, words) {
  const result = streamAnswer({ seed: seedOf(question), kind: 'full', words, prompt: question });
  let message;
  for await (const snapshot of readUIMessageStream({ stream: result.toUIMessageStream(uiStreamOptions(answerId)) })) message = snapshot;
  return message;
}

/** What the page renders of a message part (see Part in main.jsx). */
export function projectPart(part) {
  if (part.type === 'text' || part.type === 'reasoning') return { type: part.type, state: part.state, text: part.text };
  if (part.type === 'step-start') return { type: part.type };
  if (part.type.startsWith('tool-')) return { type: part.type, state: part.state, toolCallId: part.toolCallId, input: part.input, output: part.output };
  return { type: part.type, json: part };
}

/** The page's messages as rendered: [{ id, role, parts }] (runs in the page). */
export const renderedMessages = (page) =>
  page.evaluate(() =>
    [...document.querySelectorAll('article.message')].map((article) => ({
      id: article.dataset.id,
      role: article.dataset.role,
      parts: [...article.querySelectorAll('.part')].map((el) => {
        const { type, state } = el.dataset;
        if (type === 'text') return { type, state, text: el.textContent };
        if (type === 'reasoning') return { type, state, text: el.querySelector('.text').textContent };
        if (type === 'step-start') return { type };
        if (type.startsWith('tool-')) {
          const json = (sel) => (el.querySelector(sel) ? JSON.parse(el.querySelector(sel).textContent) : undefined);
          return { type, state, toolCallId: el.dataset.toolCallId, input: json('pre.input'), output: json('pre.output') };
        }
        return { type, json: JSON.parse(el.textContent) };
      }),
    })),
  );

/** The page shows the question once and its answer once, with exactly the source's parts, and is not streaming. */
export async function assertShowsAnswer(page, { question, answerId, words }, label) {
  const source = await sourceMessage(answerId, question, words);
  const messages = await renderedMessages(page);
  assert.deepEqual(messages.map((m) => [m.role, m.role === 'assistant' ? m.id : 'q']), [['user', 'q'], ['assistant', answerId]], `${label}: one question, one answer, no duplicate`);
  assert.equal(messages[0].parts[0]?.text, question, `${label}: the question`);
  assert.deepEqual(messages[1].parts, source.parts.map(projectPart), `${label}: the rendered parts equal the source's`);
  assert.equal(await page.getAttribute('#status', 'data-status'), 'ready', `${label}: not streaming`);
  assert.equal(await page.isDisabled('#stop'), true, `${label}: Stop disabled`);
}

/** Wait until the page is no longer streaming and shows the finished text part. */
export const waitAnswered = (page) =>
  page.waitForFunction(
    () => document.getElementById('status').dataset.status === 'ready'
      && document.querySelector('article[data-role="assistant"] [data-type="text"][data-state="done"]') !== null,
    null,
    { polling: 50 },
  );

/** Wait until the page shows some of the answer's text (an answer held mid-text is mid-way). */
export const waitSomeText = (page) =>
  page.waitForFunction(() => (document.querySelector('article[data-role="assistant"] [data-type="text"]')?.textContent.length ?? 0) > 0, null, { polling: 20 });

/** Sends `question` from `page`: resolves with the new answer's id once the page shows its message. */
export async function submitQuestion(page, question) {
  const before = await page.$$eval('article[data-role="assistant"]', (els) => els.map((e) => e.dataset.id));
  await page.fill('#prompt', question);
  await page.click('#send');
  return page
    .waitForFunction((known) => [...document.querySelectorAll('article[data-role="assistant"]')].map((e) => e.dataset.id).find((id) => !known.includes(id)), before, { polling: 20 })
    .then((h) => h.jsonValue());
}
