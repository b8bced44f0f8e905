// Deterministic, deliberately awkward model output for the mock model server and the tests.
//
//   import { mockTokens, mockText } from './mock/mock-text.mjs';
//   mockTokens({ seed: 1, tokens: 120 })  // → ['Streaming', ' text', ' 👩', '\u200d💻', …]
//   mockText({ seed: 1, tokens: 120 })    // → the same tokens joined
//
// The text is built to break anything that confuses UTF-16 code units (the protocol's `seq`),
// code points and grapheme clusters: astral emoji (surrogate pairs), ZWJ sequences, flags,
// skin-tone modifiers, combining marks, CJK, JSON/HTML metacharacters and the odd newline.
//
// Each token is a well-formed string (never half a surrogate pair), because a model API's JSON
// cannot carry one either. Tokens DO split grapheme clusters — 👩‍💻 across two tokens, é as `e` then
// U+0301 — as real tokenizers do. Pure: the same options always give the same tokens.

const WORDS = [
  'stream', 'token', 'edge', 'reader', 'durable', 'checkpoint', 'splice', 'prefix', 'worker',
  'object', 'buffer', 'frame', 'offset', 'browser', 'reconnect', 'seal', 'the', 'a', 'of', 'and',
  'is', 'never', 'always', 'latency', 'commit', 'live', 'tail', 'watermark',
];
const EMOJI = ['🚀', '😀', '🎉', '🔥', '✨', '🧪', '📡', '💾', '🦀', '☁️'];
const ZWJ = ['👩‍💻', '👨‍👩‍👧', '🏳️‍🌈', '🧑🏽‍🚀', '👩🏾‍🔬', '🐻‍❄️'];
const FLAGS = ['🇯🇵', '🇫🇷', '🇺🇦', '🇧🇷', '🇰🇷', '🇨🇦'];
const SKIN = ['👍🏽', '👋🏿', '🙌🏻', '✌🏼', '🤙🏾'];
// Decomposed on purpose: e + U+0301, n + U+0303, a + U+030A, o + U+0308.
const COMBINING = ['cafe\u0301', 'man\u0303ana', 'a\u030Angstro\u0308m', 'nai\u0308ve', 're\u0301sume\u0301'];
const CJK = ['流式', '传输', '文字', '日本語', 'です', '한국어', '漢字', '𠮷野家'];
const TRICKY = ['"quoted"', '\\path\\', '<b>&amp;</b>', 'data: x', '{"json":1}', '\t'];
const NEWLINES = ['\n', '.\n\n', ':\n- '];

/** mulberry32: a tiny seeded PRNG, so the text never depends on Math.random. */
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Split at code-point boundaries only, so no piece can hold half a surrogate pair. */
function splitCodePoints(s, rand, maxPieces) {
  const cps = Array.from(s);
  const pieces = [];
  let start = 0;
  while (start < cps.length) {
    const left = cps.length - start;
    const take = pieces.length + 1 >= maxPieces ? left : 1 + Math.floor(rand() * left);
    pieces.push(cps.slice(start, start + take).join(''));
    start += take;
  }
  return pieces;
}

/**
 * @param {{ seed?: number, tokens?: number }} [opts]
 * @returns {string[]} exactly `tokens` non-empty, well-formed token strings
 */
export function mockTokens({ seed = 1, tokens = 120 } = {}) {
  const count = Math.max(0, Math.floor(Number(tokens) || 0));
  const rand = prng(Number(seed) || 0);
  const pick = (list) => list[Math.floor(rand() * list.length)];
  const out = ['Streaming'];
  while (out.length < count) {
    const r = rand();
    const space = rand() < 0.8 ? ' ' : '';
    if (r < 0.45) {
      const w = pick(WORDS);
      // Sub-word tokens, as a BPE tokenizer would cut them.
      out.push(...splitCodePoints(space + w, rand, w.length > 5 && rand() < 0.3 ? 2 : 1));
    } else if (r < 0.55) out.push(space + pick(EMOJI));
    else if (r < 0.63) out.push(...splitCodePoints(space + pick(ZWJ), rand, 3));
    else if (r < 0.68) out.push(...splitCodePoints(space + pick(FLAGS), rand, 2));
    else if (r < 0.73) out.push(...splitCodePoints(space + pick(SKIN), rand, 2));
    else if (r < 0.81) out.push(...splitCodePoints(space + pick(COMBINING), rand, 3));
    else if (r < 0.89) out.push(...splitCodePoints(space + pick(CJK), rand, 2));
    else if (r < 0.95) out.push(space + pick(TRICKY));
    else out.push(pick(NEWLINES));
  }
  return out.slice(0, count);
}

/** The concatenation of {@link mockTokens}: the exact text a mock upstream produces. */
export function mockText(opts) {
  return mockTokens(opts).join('');
}

/**
 * A whole mock answer: optional reasoning, the text, and an optional tool call whose JSON
 * input is streamed in pieces (split at code points, as the APIs split their argument deltas).
 * The mock model server sends exactly this; tests compare what they receive against it.
 *
 * @param {{ seed?: number, tokens?: number, reasoning?: number, tool?: string | null }} [opts]
 *   `reasoning`: how many reasoning tokens come before the text (0: none); `tool`: the name of
 *   the tool the answer calls after its text (null: none).
 * @returns {{ reasoningTokens: string[], textTokens: string[],
 *   tool: null | { name: string, input: object, pieces: string[] } }}
 */
export function mockAnswer({ seed = 1, tokens = 120, reasoning = 0, tool = null } = {}) {
  const s = Number(seed) || 0;
  const reasoningTokens = reasoning > 0 ? mockTokens({ seed: s + 1000, tokens: reasoning }) : [];
  const textTokens = mockTokens({ seed: s, tokens });
  if (!tool) return { reasoningTokens, textTokens, tool: null };
  const rand = prng(s + 2000);
  const input = { city: CJK[s % CJK.length], query: mockText({ seed: s + 3000, tokens: 6 }), days: 1 + (s % 7), units: ['metric', 'imperial'][s % 2] };
  const json = JSON.stringify(input);
  // Argument deltas of 1 to 8 code points.
  const cps = Array.from(json);
  const pieces = [];
  for (let at = 0; at < cps.length;) {
    const take = 1 + Math.floor(rand() * 8);
    pieces.push(cps.slice(at, at + take).join(''));
    at += take;
  }
  return { reasoningTokens, textTokens, tool: { name: tool, input, pieces } };
}
