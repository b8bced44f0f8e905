// The example chat's model: AI SDK `streamText` on a mock language model (`ai/test`), whose
// answers are scripted from a seed, so a test can compute exactly what the producer will send.
// Used by the example's producer Worker (worker.js) and by the tests (tests/ai/, tests/browser/).
//
//   const result = streamAnswer({ seed: seedOf(userText), kind: 'full', delayMs: 20, abortSignal });
//   result.toUIMessageStream(uiStreamOptions(messageId));
//
// Kinds: 'text' (text only), 'reasoning' (reasoning, then text), 'tool' (a tool call with
// streamed input and its result, then text), 'full' (reasoning, a tool call, then text: the
// example's answer). Every text carries emoji, CJK, a ZWJ sequence and a skin-tone modifier, and
// the deltas are cut at code points, so a modifier can arrive in a delta of its own.
import { jsonSchema, stepCountIs, streamText, tool } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';

export const ANSWER_KINDS = ['text', 'reasoning', 'tool', 'full'];

/** FNV-1a of a string: the seed of the answer to a question. */
export function seedOf(text) {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/** Deterministic draws in [0, 1) from a seed: a counter through murmur3's 32-bit finalizer. */
function draws(seed) {
  let n = seed >>> 0;
  const next = () => {
    let h = (n = (n + 0x9e3779b9) >>> 0);
    h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
    return ((h ^ (h >>> 16)) >>> 0) / 4294967296;
  };
  next.int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1));
  next.pick = (list) => list[Math.floor(next() * list.length)];
  return next;
}

const CITIES = ['東京', 'Zürich', 'São Paulo', '서울', 'Αθήνα'];
const WORDS = ['the', 'forecast', 'says', 'sunny', 'skies', 'with', 'a', 'light', 'breeze', 'and', 'warm', 'evening', 'air', 'today'];
const MARKS = ['☀️', '🌤️', '👍🏽', '👋🏿', '🎉', '晴れ', '天気', '漢字', '한국어', '👩🏽‍💻', '🏳️‍🌈', 'naïve', 'café', '🇯🇵'];
// Always present, so every answer exercises emoji, CJK, a skin-tone modifier and a ZWJ sequence.
const MUST = '東京 👍🏽 🎉 👩🏽‍💻';

function prose(r, words) {
  const out = [MUST];
  for (let i = 0; i < words; i++) out.push(r() < 0.3 ? r.pick(MARKS) : r.pick(WORDS));
  return `${out.join(' ')}.`;
}

/** Cut `text` into deltas of 1..max code points (never inside a surrogate pair). */
function deltas(r, text, max = 6) {
  const points = Array.from(text);
  const out = [];
  for (let i = 0; i < points.length; ) {
    const n = r.int(1, max);
    out.push(points.slice(i, i + n).join(''));
    i += n;
  }
  return out;
}

const usage = (input, output) => ({
  inputTokens: { total: input, noCache: input, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: output, text: output, reasoning: 0 },
});

/** The model's stream parts, one array per step, for an answer of `kind` from `seed`. */
export function answerScript({ seed, kind = 'full', words = 40 }) {
  if (!ANSWER_KINDS.includes(kind)) throw new TypeError(`unknown answer kind ${kind}`);
  const r = draws(seed);
  const city = r.pick(CITIES);
  const step = (parts, finishReason) => [
    { type: 'stream-start', warnings: [] },
    ...parts,
    { type: 'finish', usage: usage(12, parts.length), finishReason: { unified: finishReason, raw: finishReason } },
  ];
  const textParts = (id, text) => [
    { type: 'text-start', id },
    ...deltas(r, text).map((delta) => ({ type: 'text-delta', id, delta })),
    { type: 'text-end', id },
  ];
  const reasoningParts = (id, text) => [
    { type: 'reasoning-start', id },
    ...deltas(r, text).map((delta) => ({ type: 'reasoning-delta', id, delta })),
    { type: 'reasoning-end', id },
  ];
  const toolParts = (id) => {
    const input = JSON.stringify({ city, unit: 'celsius' });
    return [
      { type: 'tool-input-start', id, toolName: 'weather' },
      ...deltas(r, input, 4).map((delta) => ({ type: 'tool-input-delta', id, delta })),
      { type: 'tool-input-end', id },
      { type: 'tool-call', toolCallId: id, toolName: 'weather', input },
    ];
  };
  const thinking = () => `Thinking about ${city}: ${prose(r, Math.ceil(words / 2))}`;
  const answer = () => `In ${city}: ${prose(r, words)}`;
  switch (kind) {
    case 'text':
      return [step(textParts('text-1', answer()), 'stop')];
    case 'reasoning':
      return [step([...reasoningParts('reasoning-1', thinking()), ...textParts('text-1', answer())], 'stop')];
    case 'tool':
      return [step(toolParts('call-1'), 'tool-calls'), step(textParts('text-1', answer()), 'stop')];
    case 'full':
      return [
        step([...reasoningParts('reasoning-1', thinking()), ...toolParts('call-1')], 'tool-calls'),
        step(textParts('text-1', answer()), 'stop'),
      ];
  }
}

/** The tool the scripted model calls: deterministic, so its result is part of the oracle. */
export const tools = {
  weather: tool({
    description: 'The weather in a city',
    inputSchema: jsonSchema({ type: 'object', properties: { city: { type: 'string' }, unit: { type: 'string' } }, required: ['city'] }),
    execute: async ({ city, unit = 'celsius' }) => ({ city, unit, temperature: 10 + (seedOf(city) % 20), sky: 'sunny ☀️ 晴れ' }),
  }),
};

/**
 * A mock model that plays `steps` (one per call), one part every `delayMs`. It stops when the
 * call is aborted or its stream cancelled, and says so through `onStop(reason)`. `holdEnd`, a
 * function returning a promise, holds the last step before its last two parts (the text's end
 * and the finish) until that promise settles (or the call is aborted): a test holds the answer
 * until it has done what it must mid-answer, instead of racing the model's clock.
 */
export function scriptedModel(steps, { delayMs = 0, onStop, holdEnd } = {}) {
  let call = 0;
  return new MockLanguageModelV4({
    doStream: async ({ abortSignal }) => {
      const step = Math.min(call++, steps.length - 1);
      const parts = steps[step];
      const holdAt = holdEnd && step === steps.length - 1 ? parts.length - 2 : -1;
      let i = 0;
      const stream = new ReadableStream({
        async pull(controller) {
          if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
          if (i === holdAt && !abortSignal?.aborted) {
            const aborted = new Promise((resolve) => abortSignal?.addEventListener('abort', resolve, { once: true }));
            await Promise.race([holdEnd(), aborted]);
          }
          if (abortSignal?.aborted) {
            onStop?.('aborted');
            return controller.error(abortSignal.reason);
          }
          if (i < parts.length) controller.enqueue(parts[i++]);
          else controller.close();
        },
        cancel() {
          onStop?.('cancelled');
        },
      });
      return { stream };
    },
  });
}

/** `streamText` of the scripted answer (what the example's producer runs); `holdEnd` as in scriptedModel. */
export function streamAnswer({ seed, kind = 'full', words, delayMs = 0, abortSignal, onStop, holdEnd, prompt = 'What is the weather?' }) {
  return streamText({
    model: scriptedModel(answerScript({ seed, kind, words }), { delayMs, onStop, holdEnd }),
    prompt,
    tools,
    stopWhen: stepCountIs(3),
    abortSignal,
  });
}

/** The `toUIMessageStream` options of the example: the message id, and usage at the finish. */
export function uiStreamOptions(messageId) {
  return {
    // The UI message id is the stream (message row) id: a resumed replay then replaces the
    // message it belongs to instead of adding a second one (see README "Using it with the AI SDK").
    generateMessageId: () => messageId,
    messageMetadata: ({ part }) => (part.type === 'finish' ? { usage: part.totalUsage, finishReason: part.finishReason } : undefined),
  };
}
