#!/usr/bin/env node
// A mock of three streaming model APIs, for development and tests: a stand-in for an upstream
// model, not a model. Node 20, node:http only.
//
//   node mock/model-server.mjs --port 8788 [--host 127.0.0.1]
//   import { startMockServer } from './mock/model-server.mjs';
//   const mock = await startMockServer({ port: 0 });  // → { url, close() }
//
// Endpoints (any request body is accepted and recorded; a create is answered with a stream):
//   POST /v1/chat/completions   OpenAI Chat Completions, `data: {chunk}` lines, then `data: [DONE]`
//   POST /v1/responses          OpenAI Responses, `event: response.*` events
//   POST /v1/messages           Anthropic Messages, `event: message_start` … `message_stop`, pings
//   GET  /_mock/requests        every request so far: [{ id, kind (create, reattach, retrieve,
//                               cancel), path, query, authorization, credential (the SHA-256 hex
//                               of the authorization or x-api-key header, so a test can check
//                               which key arrived), responseId, tokensSent, completed, aborted,
//                               fail, held, body, abortedAt (ms since the epoch) }]
//   POST /_mock/reset           forget them
//   POST /_mock/hold?seed=S&at=N  the next requests with seed=S stop before text token N and
//                               wait (`held: true`) until POST /_mock/release?seed=S: a test
//                               holds the answer mid-way for as long as it needs (the demo page
//                               builds its upstream URL itself, so the hold is keyed by seed)
//
// Background mode (OpenAI Responses, `"background": true` in the body, as the real API): the
// generation runs on the server whether or not anyone listens, every event numbered by
// `sequence_number` and kept. With `"stream": true` the create request streams it; without, it
// answers the queued response object at once.
//   GET  /v1/responses/{id}?stream=true[&starting_after=N]   re-attach: the kept events after
//                               N (all without it), then the live ones; 404 once expired
//   GET  /v1/responses/{id}     the stored response: status (queued, in_progress, completed,
//                               failed, cancelled) and, once completed, its output
//   POST /v1/responses/{id}/cancel   stops the generation (its streams end); idempotent
//   GET  /_mock/responses       every background response: [{ id, tag, status, stream,
//                               textTokens, sequence (the last event's number), text, holdAt,
//                               perturbAt, expired, creates, reattaches: [{ startingAfter,
//                               perturbed } | { startingAfter, refused }], retrieves, cancels,
//                               listeners }]
//   POST /_mock/release?tag=T[&until=K]   a held generation goes on, to text token K (not
//                               included) or to its end. `id=` names a response instead of `tag=`
//   POST /_mock/perturb?tag=T&at=K        re-attaches from now on get different text from text
//                               token K on (each delta prefixed with ≠): a replay that does not
//                               match what was first sent
//   POST /_mock/expire?tag=T[&what=stream|response]   re-attaching is refused 404 (`stream`),
//                               or the response is gone altogether (`response`)
//   POST /_mock/drop?tag=T      destroys the create request's socket now (after fail=stall: the
//                               client then re-attaches when the test says, not the clock)
//
// What a pump must never reach or relay (tests/e2e/hostile.test.mjs): a stand-in for an internal
// service, whose answers carry INTERNAL_SECRET.
//   ANY  /_mock/internal[?status=N]   answers N (default 500) with a text/plain body holding the
//                               secret; with status=200, as `data:` lines (an SSE stream no
//                               model API would send)
//   ANY  /_mock/redirect?to=URL  answers 302 to URL (default /_mock/internal), its body holding
//                               the secret too
//
// Query options (the caller controls the mock through the upstream URL it hands the Worker):
//   tokens=120   how many text tokens (the answer is mockAnswer(…) from ./mock-text.mjs)
//   rate=40      tokens per second; 0 sends as fast as the socket takes them
//   seed=1       which deterministic answer
//   reasoning=0  reasoning tokens before the text, in the API's own shape: Anthropic `thinking`
//                block (with a signature), Responses reasoning summary, and for chat the
//                `reasoning_content` deltas of OpenAI-compatible servers (OpenAI sends none)
//   tool=        a tool name: after the text the model calls it, its JSON input streamed in
//                pieces (Anthropic `tool_use` + `input_json_delta`, chat `tool_calls`, Responses
//                `function_call` + `function_call_arguments.delta`); the finish reason says so
//   usage=1      chat only: the last chunk carries usage, as the real API does when the request
//                body has `stream_options: {include_usage: true}` (also honoured). Responses and
//                Anthropic always report usage.
//   fail=        error     the API's own error event at failAt, then the response ends
//                drop      the socket is destroyed at failAt (no terminator, no error)
//                malformed a `data:` line that is not JSON at failAt, then the stream CONTINUES
//                          normally, so the consumer's policy (skip or fail) decides the outcome
//                stall     sending stops at failAt and the connection stays open
//                http500   a 500 with the API's JSON error body, at once
//   failAt=      text token index of the failure (default: half of `tokens`)
//   nul=1        the first text token starts with U+0000
//   holdAt=K     background only: the generation stops before text token K until a release
//                (the test paces it, never the clock); rate= still paces what runs
//   perturbAt=K  background only: as POST /_mock/perturb from the start
//
// In background mode the failures strike the create request's socket, never the generation,
// which goes on as the real one does: `drop` destroys the socket, `stall` sends it nothing more
// (it stays open; POST /_mock/drop destroys it later). `error` fails the generation (status
// `failed`); `malformed` is not injected.
//
// `aborted` is true when the CLIENT closed the connection before the end: that is how a test
// proves a cancel reached the upstream (`abortedAt`: when, for a latency). A `drop` is the
// server's doing and is not an abort.

import { createServer } from 'node:http';
import { createHash, randomUUID } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { mockAnswer } from './mock-text.mjs';

/** What the stand-in internal service's answers hold: a reader must never see it. */
export const INTERNAL_SECRET = 'db_password=hunter2';

const MODEL = { openai: 'gpt-4o-mini-2024-07-18', anthropic: 'claude-3-5-haiku-20241022' };

/** An SSE event as the real APIs write it: an optional `event:` line and one `data:` line. */
function sse(event, data) {
  const payload = typeof data === 'string' ? data : JSON.stringify(data);
  return `${event ? `event: ${event}\n` : ''}data: ${payload}\n\n`;
}

// Each format turns an answer into its API's events. `ctx` = { id, msgId, created, n (text tokens),
// text (so far), reasoning (so far), tool (null or { name, callId, itemId, input, json (so far) }),
// reasoningTokens, usage (whether a chat client asked for usage), sequence (the Responses API's
// event counter), sent (text tokens so far) }. Phases, each a list of events:
//   start · reasoningStart, reasoningDelta × N, reasoningEnd · textStart, delta × n, textEnd ·
//   toolStart, toolDelta × k, toolEnd · end
// plus the format's own mid-stream `error` event, a `malformed` event (named like a delta, so a
// parser that dispatches on the event name still meets it) and its HTTP 500 body.
const FORMATS = {
  '/v1/chat/completions': (() => {
    const chunk = (ctx, delta, finish = null, extra = {}) => sse(null, {
      id: ctx.id, object: 'chat.completion.chunk', created: ctx.created, model: MODEL.openai,
      system_fingerprint: 'fp_mock', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...extra,
    });
    const error = { error: { message: 'The server had an error while processing your request.', type: 'server_error', param: null, code: null } };
    return {
      idPrefix: 'chatcmpl-',
      start: (ctx) => [chunk(ctx, { role: 'assistant', content: '', refusal: null })],
      // OpenAI's own chat API streams no reasoning; OpenAI-compatible servers (DeepSeek, vLLM)
      // stream it as `reasoning_content` before the content.
      reasoningStart: () => [],
      reasoningDelta: (ctx, text) => chunk(ctx, { content: null, reasoning_content: text }),
      reasoningEnd: () => [],
      textStart: () => [],
      delta: (ctx, text) => chunk(ctx, { content: text }),
      textEnd: () => [],
      toolStart: (ctx) => [chunk(ctx, { tool_calls: [{ index: 0, id: ctx.tool.callId, type: 'function', function: { name: ctx.tool.name, arguments: '' } }] })],
      toolDelta: (ctx, json) => chunk(ctx, { tool_calls: [{ index: 0, function: { arguments: json } }] }),
      toolEnd: () => [],
      end: (ctx) => [
        chunk(ctx, {}, ctx.tool ? 'tool_calls' : 'stop'),
        // Only when the request asked for it (`stream_options.include_usage`): a last chunk
        // with no choices.
        ...(ctx.usage ? [sse(null, {
          id: ctx.id, object: 'chat.completion.chunk', created: ctx.created, model: MODEL.openai, system_fingerprint: 'fp_mock', choices: [],
          usage: {
            prompt_tokens: 12, completion_tokens: ctx.outputTokens, total_tokens: 12 + ctx.outputTokens,
            prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
            completion_tokens_details: { reasoning_tokens: ctx.reasoningTokens, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
          },
        })] : []),
        sse(null, '[DONE]'),
      ],
      error: () => sse(null, error),
      malformed: 'data: {"choices": [{"delta": {"content": "unterminated\n\n',
      http500: error,
    };
  })(),

  '/v1/responses': (() => {
    // Every Responses event is numbered; a background generation also keeps it (`ctx.onEvent`)
    // to serve it again to a re-attaching client.
    const ev = (ctx, type, fields) => {
      const data = { type, sequence_number: ctx.sequence++, ...fields };
      ctx.onEvent?.(type, data);
      return sse(type, data);
    };
    const response = (ctx, status) => ({
      id: ctx.id, object: 'response', created_at: ctx.created, status, background: ctx.background, error: null, incomplete_details: null,
      model: MODEL.openai, output: status === 'completed' ? items(ctx) : [], usage: status === 'completed' ? {
        input_tokens: 12, input_tokens_details: { cached_tokens: 0 },
        output_tokens: ctx.outputTokens, output_tokens_details: { reasoning_tokens: ctx.reasoningTokens }, total_tokens: 12 + ctx.outputTokens,
      } : null,
    });
    // The output items in order: reasoning, the message, the function call.
    const reasoningItem = (ctx, done) => ({ id: ctx.rsId, type: 'reasoning', summary: done ? [{ type: 'summary_text', text: ctx.reasoning }] : [] });
    const message = (ctx, status) => ({
      id: ctx.msgId, type: 'message', status, role: 'assistant',
      content: status === 'completed' ? [{ type: 'output_text', text: ctx.text, annotations: [] }] : [],
    });
    const call = (ctx, status) => ({
      id: ctx.tool.itemId, type: 'function_call', status, arguments: status === 'completed' ? ctx.tool.json : '', call_id: ctx.tool.callId, name: ctx.tool.name,
    });
    const items = (ctx) => [
      ...(ctx.reasoningTokens ? [reasoningItem(ctx, true)] : []),
      message(ctx, 'completed'),
      ...(ctx.tool ? [call(ctx, 'completed')] : []),
    ];
    const out = (ctx) => (ctx.reasoningTokens ? 1 : 0); // the message's output_index
    const at = (ctx) => ({ item_id: ctx.msgId, output_index: out(ctx), content_index: 0 });
    const summary = (ctx) => ({ item_id: ctx.rsId, output_index: 0, summary_index: 0 });
    const fc = (ctx) => ({ item_id: ctx.tool.itemId, output_index: out(ctx) + 1 });
    return {
      idPrefix: 'resp_',
      // A background response is queued first, as the real API reports it.
      start: (ctx) => [
        ...(ctx.background ? [
          ev(ctx, 'response.created', { response: response(ctx, 'queued') }),
          ev(ctx, 'response.queued', { response: response(ctx, 'queued') }),
        ] : [ev(ctx, 'response.created', { response: response(ctx, 'in_progress') })]),
        ev(ctx, 'response.in_progress', { response: response(ctx, 'in_progress') }),
      ],
      // Reasoning summaries: sent when the request asks `reasoning.summary` of a reasoning model.
      reasoningStart: (ctx) => [
        ev(ctx, 'response.output_item.added', { output_index: 0, item: reasoningItem(ctx, false) }),
        ev(ctx, 'response.reasoning_summary_part.added', { ...summary(ctx), part: { type: 'summary_text', text: '' } }),
      ],
      reasoningDelta: (ctx, text) => ev(ctx, 'response.reasoning_summary_text.delta', { ...summary(ctx), delta: text, obfuscation: 'mock' }),
      reasoningEnd: (ctx) => [
        ev(ctx, 'response.reasoning_summary_text.done', { ...summary(ctx), text: ctx.reasoning }),
        ev(ctx, 'response.reasoning_summary_part.done', { ...summary(ctx), part: { type: 'summary_text', text: ctx.reasoning } }),
        ev(ctx, 'response.output_item.done', { output_index: 0, item: reasoningItem(ctx, true) }),
      ],
      textStart: (ctx) => [
        ev(ctx, 'response.output_item.added', { output_index: out(ctx), item: message(ctx, 'in_progress') }),
        ev(ctx, 'response.content_part.added', { ...at(ctx), part: { type: 'output_text', text: '', annotations: [] } }),
      ],
      delta: (ctx, text) => ev(ctx, 'response.output_text.delta', { ...at(ctx), delta: text, logprobs: [] }),
      textEnd: (ctx) => [
        ev(ctx, 'response.output_text.done', { ...at(ctx), text: ctx.text, logprobs: [] }),
        ev(ctx, 'response.content_part.done', { ...at(ctx), part: { type: 'output_text', text: ctx.text, annotations: [] } }),
        ev(ctx, 'response.output_item.done', { output_index: out(ctx), item: message(ctx, 'completed') }),
      ],
      toolStart: (ctx) => [ev(ctx, 'response.output_item.added', { output_index: out(ctx) + 1, item: call(ctx, 'in_progress') })],
      toolDelta: (ctx, json) => ev(ctx, 'response.function_call_arguments.delta', { ...fc(ctx), delta: json, obfuscation: 'mock' }),
      toolEnd: (ctx) => [
        ev(ctx, 'response.function_call_arguments.done', { ...fc(ctx), arguments: ctx.tool.json }),
        ev(ctx, 'response.output_item.done', { output_index: out(ctx) + 1, item: call(ctx, 'completed') }),
      ],
      end: (ctx) => [ev(ctx, 'response.completed', { response: response(ctx, 'completed') })],
      // The stored response object (`GET /v1/responses/{id}`), for background mode.
      stored: (ctx, status) => response(ctx, status),
      error: (ctx) => ev(ctx, 'error', { code: 'server_error', message: 'The server had an error while processing your request.', param: null }),
      malformed: 'event: response.output_text.delta\ndata: {"type": "response.output_text.delta", "delta": \n\n',
      http500: { error: { message: 'The server had an error while processing your request.', type: 'server_error', param: null, code: 'server_error' } },
    };
  })(),

  '/v1/messages': (() => {
    const ev = (type, fields = {}) => sse(type, { type, ...fields });
    // Content block indexes: thinking (when asked for), then text, then the tool call.
    const textIndex = (ctx) => (ctx.reasoningTokens ? 1 : 0);
    return {
      idPrefix: 'msg_',
      start: (ctx) => [
        ev('message_start', { message: { id: ctx.id, type: 'message', role: 'assistant', model: MODEL.anthropic, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 12, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 1 } } }),
      ],
      // Extended thinking (`thinking: {type: "enabled"}` in a real request): a thinking block
      // whose signature arrives last.
      reasoningStart: () => [ev('content_block_start', { index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } }), ev('ping')],
      reasoningDelta: (ctx, text) => ev('content_block_delta', { index: 0, delta: { type: 'thinking_delta', thinking: text } }),
      reasoningEnd: (ctx) => [
        ev('content_block_delta', { index: 0, delta: { type: 'signature_delta', signature: `EqQBCgIYAhIM${ctx.id.slice(4, 28)}` } }),
        ev('content_block_stop', { index: 0 }),
      ],
      textStart: (ctx) => [ev('content_block_start', { index: textIndex(ctx), content_block: { type: 'text', text: '' } }), ...(ctx.reasoningTokens ? [] : [ev('ping')])],
      // A ping every 25 tokens, as the real API interleaves them, so parsers must skip them.
      delta: (ctx, text) => (ctx.sent > 0 && ctx.sent % 25 === 0 ? ev('ping') : '') +
        ev('content_block_delta', { index: textIndex(ctx), delta: { type: 'text_delta', text } }),
      textEnd: (ctx) => [ev('content_block_stop', { index: textIndex(ctx) })],
      toolStart: (ctx) => [
        ev('content_block_start', { index: textIndex(ctx) + 1, content_block: { type: 'tool_use', id: ctx.tool.callId, name: ctx.tool.name, input: {} } }),
        ev('content_block_delta', { index: textIndex(ctx) + 1, delta: { type: 'input_json_delta', partial_json: '' } }),
      ],
      toolDelta: (ctx, json) => ev('content_block_delta', { index: textIndex(ctx) + 1, delta: { type: 'input_json_delta', partial_json: json } }),
      toolEnd: (ctx) => [ev('content_block_stop', { index: textIndex(ctx) + 1 })],
      end: (ctx) => [
        ev('message_delta', { delta: { stop_reason: ctx.tool ? 'tool_use' : 'end_turn', stop_sequence: null }, usage: { output_tokens: ctx.outputTokens } }),
        ev('message_stop'),
      ],
      error: () => ev('error', { error: { type: 'overloaded_error', message: 'Overloaded' } }),
      malformed: 'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": {\n\n',
      http500: { type: 'error', error: { type: 'api_error', message: 'Internal server error' } },
    };
  })(),
};

const FAILS = new Set(['error', 'drop', 'malformed', 'stall', 'http500']);

function json(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

function intParam(query, name, fallback) {
  const n = Number.parseInt(query[name] ?? '', 10);
  return Number.isFinite(n) && n >= 0 ? n : fallback;
}

async function readBody(req) {
  const parts = [];
  for await (const part of req) parts.push(part);
  const raw = Buffer.concat(parts).toString('utf8');
  try {
    return raw ? JSON.parse(raw) : null;
  } catch {
    return raw;
  }
}

/**
 * One response's plan: its context and its steps, the failure options read. A `paced` step
 * (one token of reasoning, text or tool input) waits one interval after the previous one; the
 * structure between them goes out at once, as the real APIs send it. A text token's step knows
 * its index (`token`). Failures strike before text token `failAt` (at `failAt = tokens`: after
 * the last one): `failStep` is the step they strike before.
 */
function plan(format, record, { background = false } = {}) {
  const q = record.query;
  const n = intParam(q, 'tokens', 120);
  const fail = FAILS.has(q.fail) ? q.fail : null;
  const failAt = Math.min(intParam(q, 'failAt', Math.floor(n / 2)), n);
  const answer = mockAnswer({ seed: intParam(q, 'seed', 1), tokens: n, reasoning: intParam(q, 'reasoning', 0), tool: q.tool || null });
  const uid = () => randomUUID().replaceAll('-', '');
  const ctx = {
    id: `${format.idPrefix}${uid()}`, msgId: `msg_${uid()}`, rsId: `rs_${uid()}`, created: Math.floor(Date.now() / 1000),
    text: '', reasoning: '', n, sent: 0, sequence: 0, background,
    reasoningTokens: answer.reasoningTokens.length,
    outputTokens: answer.reasoningTokens.length + n + (answer.tool ? answer.tool.pieces.length : 0),
    tool: answer.tool && {
      name: answer.tool.name, input: answer.tool.input, json: '',
      callId: `${format.idPrefix === 'msg_' ? 'toolu_' : 'call_'}${uid().slice(0, 24)}`, itemId: `fc_${uid()}`,
    },
    usage: q.usage === '1' || record.body?.stream_options?.include_usage === true,
  };

  const steps = [];
  const add = (write, paced, token) => steps.push({ write, paced, token });
  const bundle = (events) => events.join('');
  add(() => bundle(format.start(ctx)), false);
  answer.reasoningTokens.forEach((token, i) => add(() => {
    ctx.reasoning += token;
    return (i === 0 ? bundle(format.reasoningStart(ctx)) : '') + format.reasoningDelta(ctx, token);
  }, true));
  if (answer.reasoningTokens.length) add(() => bundle(format.reasoningEnd(ctx)), false);
  add(() => bundle(format.textStart(ctx)), false);
  // nul=1: the first text token starts with U+0000 (what PostgreSQL's text cannot store).
  const textTokens = q.nul === '1' ? answer.textTokens.map((t, i) => (i === 0 ? `\u0000${t}` : t)) : answer.textTokens;
  const tokenSteps = textTokens.map((token, i) => add(() => {
    const event = format.delta(ctx, token);
    ctx.text += token;
    ctx.sent += 1;
    record.tokensSent = ctx.sent;
    return event;
  }, true, i) - 1);
  const failStep = failAt < n ? tokenSteps[failAt] : add(() => bundle(format.textEnd(ctx)), false) - 1;
  if (failAt < n) add(() => bundle(format.textEnd(ctx)), false);
  if (answer.tool) {
    answer.tool.pieces.forEach((piece, i) => add(() => {
      ctx.tool.json += piece;
      return (i === 0 ? bundle(format.toolStart(ctx)) : '') + format.toolDelta(ctx, piece);
    }, true));
    add(() => bundle(format.toolEnd(ctx)), false);
  }
  add(() => bundle(format.end(ctx)), false);
  return { ctx, steps, fail, failStep, rate: intParam(q, 'rate', 40) };
}

/**
 * Runs `steps` one at a time: the first paced step goes at once, every later one an interval
 * (1000 / `rate` ms) after the step before; 0 runs them as fast as the event loop turns.
 * `run(step, index)` performs one and says whether to go on; `held(step)` may stop before one
 * (until `resume()`). Returns { resume(), stop() }.
 */
function pacer(steps, rate, run, held = () => false) {
  let next = 0;
  let pacedYet = false;
  let timer = null;
  let stopped = false;
  const fire = () => {
    timer = null;
    if (stopped) return;
    if (!run(steps[next], next)) return void (stopped = true);
    next += 1;
    schedule();
  };
  const schedule = () => {
    if (stopped || timer || next >= steps.length || held(steps[next])) return;
    const wait = steps[next].paced && pacedYet && rate > 0;
    pacedYet ||= steps[next].paced;
    timer = wait ? setTimeout(fire, 1000 / rate) : setImmediate(fire);
  };
  return {
    resume: schedule,
    stop() {
      stopped = true;
      clearTimeout(timer);
      clearImmediate(timer);
    },
  };
}

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  connection: 'keep-alive',
};

/**
 * Stream one model response on its own socket, token by token, honouring the answer, failure and
 * hold options (`hold`: stop before text token `hold.at` until the test releases it).
 */
function streamResponse(format, record, res, hold) {
  const { ctx, steps, fail, failStep, rate } = plan(format, record);
  const lastToken = Math.max(0, intParam(record.query, 'tokens', 120) - 1);
  const held = (step) => {
    if (!hold || hold.released || step.token === undefined || step.token < Math.min(hold.at, lastToken)) return false;
    if (!record.held) {
      record.held = true;
      hold.waiting.push(() => {
        record.held = false;
        pace.resume();
      });
    }
    return true;
  };
  if (fail === 'http500') {
    record.fail = fail;
    return json(res, 500, format.http500);
  }
  let dropped = false;
  const run = (step, index) => {
    if (res.destroyed) return false;
    if (fail && index === failStep) {
      record.fail = fail;
      if (fail === 'error') return void res.end(format.error(ctx));
      if (fail === 'drop') {
        dropped = true;
        return void res.socket.destroy();
      }
      if (fail === 'stall') return false;
      if (fail === 'malformed') res.write(format.malformed);
    }
    res.write(step.write());
    if (index === steps.length - 1) {
      record.completed = true;
      return void res.end();
    }
    return true;
  };
  const pace = pacer(steps, rate, run, held);
  res.on('close', () => {
    pace.stop();
    if (!res.writableFinished && !dropped) {
      record.aborted = true;
      record.abortedAt = Date.now();
    }
  });
  res.writeHead(200, SSE_HEADERS);
  res.socket?.setNoDelay(true);
  pace.resume();
}

/** An OpenAI-shaped error body. */
const openAiError = (message, type = 'invalid_request_error') => ({ error: { message, type, param: null, code: null } });

/**
 * A background response (OpenAI Responses with `background: true`): the generation runs on
 * the server whether or not any socket listens. Every event is kept with its sequence number;
 * the create request (when it asked `stream: true`) and each re-attach (`GET
 * /v1/responses/{id}?stream=true&starting_after=N`) are subscribers that get the kept events
 * after their cursor, then the live ones.
 *
 * Test controls, none of them a clock: `holdAt` (text token K is not produced until a release),
 * `perturbAt` (a re-attach gets different text from token K on: a replay that does not match
 * what was first sent), `expired` (`stream`: re-attaching is refused 404 while the stored
 * response is still served; `response`: both are 404).
 */
class Generation {
  constructor(format, record) {
    const { ctx, steps, fail, failStep, rate } = plan(format, record, { background: true });
    const q = record.query;
    Object.assign(this, { format, record, ctx, steps, fail, failStep });
    this.id = ctx.id;
    this.tag = q.tag ?? null;
    this.status = 'queued';
    /** Every event produced: { type, data, token (a text delta's token index, else null) }. */
    this.events = [];
    this.subscribers = new Set();
    this.holdAt = intParam(q, 'holdAt', Infinity);
    this.perturbAt = intParam(q, 'perturbAt', null);
    this.expired = null;
    this.reattaches = [];
    this.retrieves = 0;
    this.cancels = 0;
    ctx.onEvent = (type, data) => this.events.push({ type, data, token: type === 'response.output_text.delta' ? ctx.sent : null });
    this.pace = pacer(steps, rate, (step, index) => this.run(step, index), (step) => step.token !== undefined && step.token >= this.holdAt);
  }

  get done() {
    return !['queued', 'in_progress'].includes(this.status);
  }

  run(step, index) {
    if (this.fail && index === this.failStep) {
      this.record.fail = this.fail;
      // Only the create request's socket fails: the generation goes on without it.
      if (this.fail === 'drop') this.dropCreate();
      if (this.fail === 'stall') for (const sub of this.subscribers) if (sub.create) sub.muted = true;
      if (this.fail === 'error') {
        this.format.error(this.ctx);
        return this.finish('failed');
      }
    }
    step.write();
    this.status = 'in_progress';
    if (index === this.steps.length - 1) return this.finish('completed');
    this.broadcast();
    return true;
  }

  finish(status) {
    this.status = status;
    this.record.completed = status === 'completed';
    this.broadcast();
    for (const sub of this.subscribers) if (!sub.muted) sub.res.end();
    return false;
  }

  /** The event as a subscriber gets it: a perturbed replay changes the text from `perturbAt` on. */
  render({ type, data, token }, replay) {
    const perturb = replay && this.perturbAt !== null && token !== null && token >= this.perturbAt;
    return sse(type, perturb ? { ...data, delta: `≠${data.delta}` } : data);
  }

  broadcast() {
    for (const sub of this.subscribers) {
      while (!sub.muted && sub.next < this.events.length) sub.res.write(this.render(this.events[sub.next++], sub.replay));
    }
  }

  /** Destroys the create request's socket (`fail=drop`, or `POST /_mock/drop` after a stall). */
  dropCreate() {
    for (const sub of this.subscribers) if (sub.create) sub.drop();
  }

  /** Serves the events after sequence number `after` (-1: all), then the live ones, on `res`. */
  subscribe(res, { after = -1, create = false } = {}) {
    let dropped = false;
    const sub = {
      res, create, replay: !create, next: this.events.findIndex((e) => e.data.sequence_number > after),
      drop() {
        dropped = true;
        res.socket.destroy();
      },
    };
    if (sub.next < 0) sub.next = this.events.length;
    res.writeHead(200, SSE_HEADERS);
    res.socket?.setNoDelay(true);
    this.subscribers.add(sub);
    res.on('close', () => {
      this.subscribers.delete(sub);
      if (create && !res.writableFinished && !dropped) this.record.aborted = true;
    });
    this.broadcast();
    if (this.done) res.end();
  }

  release(until) {
    this.holdAt = until ?? Infinity;
    this.pace.resume();
  }

  /** `POST /v1/responses/{id}/cancel`: stops the generation; the subscribers' streams end. */
  cancel() {
    this.cancels += 1;
    if (this.done) return;
    this.pace.stop();
    this.finish('cancelled');
  }

  /** The stored response object, as `GET /v1/responses/{id}` answers it. */
  stored() {
    return this.format.stored(this.ctx, this.status);
  }

  view() {
    return {
      id: this.id, tag: this.tag, status: this.status, stream: this.record.body?.stream === true,
      textTokens: this.ctx.sent, sequence: this.events.length - 1, text: this.ctx.text,
      holdAt: Number.isFinite(this.holdAt) ? this.holdAt : null, perturbAt: this.perturbAt, expired: this.expired,
      creates: 1, reattaches: this.reattaches, retrieves: this.retrieves, cancels: this.cancels,
      listeners: this.subscribers.size,
    };
  }
}

/** The credential a request carried, hashed (SHA-256, hex): a test can check it without the mock keeping the key. */
function credentialHash(req) {
  const value = req.headers.authorization ?? req.headers['x-api-key'];
  return value ? createHash('sha256').update(value).digest('hex') : null;
}

/** Start the mock. `port: 0` picks a free port. Resolves once it is listening. */
export function startMockServer({ port = 0, host = '127.0.0.1' } = {}) {
  let requests = [];
  let nextId = 1;
  /** Background responses by id. */
  const generations = new Map();
  const responsesFormat = FORMATS['/v1/responses'];
  /** The background response a control request names by `id`, or by `tag` (the latest so tagged). */
  const named = (url) => {
    const id = url.searchParams.get('id');
    const tag = url.searchParams.get('tag');
    return id ? generations.get(id) : [...generations.values()].filter((g) => g.tag === tag).at(-1);
  };
  const controls = {
    '/_mock/release': (g, q) => g.release(intParam(q, 'until', undefined)),
    '/_mock/perturb': (g, q) => void (g.perturbAt = intParam(q, 'at', 0)),
    '/_mock/expire': (g, q) => void (g.expired = q.what === 'response' ? 'response' : 'stream'),
    '/_mock/drop': (g) => g.dropCreate(),
  };

  const holds = new Map(); // seed → { at, released, waiting: [resume] }
  const server = createServer(async (req, res) => {
    const url = new URL(req.url, 'http://mock.invalid');
    const path = url.pathname;
    if (path === '/_mock/internal') {
      const status = intParam(Object.fromEntries(url.searchParams), 'status', 500);
      res.writeHead(status, { 'content-type': status === 200 ? 'text/event-stream' : 'text/plain' });
      return res.end(status === 200 ? `data: ${INTERNAL_SECRET}\n\ndata: ${INTERNAL_SECRET}\n\n` : `internal error: ${INTERNAL_SECRET}`);
    }
    if (path === '/_mock/redirect') {
      res.writeHead(302, { location: url.searchParams.get('to') ?? '/_mock/internal', 'content-type': 'text/plain' });
      return res.end(`moved: ${INTERNAL_SECRET}`);
    }
    if (req.method === 'GET' && path === '/_mock/requests') return json(res, 200, requests);
    if (req.method === 'GET' && path === '/_mock/responses') return json(res, 200, [...generations.values()].map((g) => g.view()));
    if (req.method === 'POST' && path === '/_mock/reset') {
      for (const g of generations.values()) g.pace.stop();
      generations.clear();
      requests = [];
      return json(res, 200, { ok: true });
    }
    if (req.method === 'POST' && (path === '/_mock/hold' || (path === '/_mock/release' && url.searchParams.has('seed')))) {
      const seed = url.searchParams.get('seed');
      if (!seed) return json(res, 400, { error: { message: 'seed= is required', type: 'invalid_request_error' } });
      if (path === '/_mock/hold') holds.set(seed, { at: intParam(Object.fromEntries(url.searchParams), 'at', 0), released: false, waiting: [] });
      else {
        const hold = holds.get(seed);
        holds.delete(seed);
        if (hold) {
          hold.released = true;
          for (const resume of hold.waiting.splice(0)) resume();
        }
      }
      return json(res, 200, { ok: true });
    }
    if (req.method === 'POST' && controls[path]) {
      const g = named(url);
      if (!g) return json(res, 404, { error: `no background response named by ${url.search}` });
      controls[path](g, Object.fromEntries(url.searchParams));
      return json(res, 200, g.view());
    }
    const record = {
      id: nextId++,
      kind: 'create',
      path,
      query: Object.fromEntries(url.searchParams),
      authorization: Boolean(req.headers.authorization || req.headers['x-api-key']),
      credential: credentialHash(req),
      responseId: null,
      tokensSent: 0,
      completed: false,
      aborted: false,
      fail: null,
      held: false,
      body: null,
    };

    // Background responses by id: re-attach (stream), retrieve, cancel.
    const byId = /^\/v1\/responses\/([^/]+)(\/cancel)?$/.exec(path);
    if (byId) {
      const [, id, cancel] = byId;
      const g = generations.get(id);
      record.responseId = id;
      record.path = '/v1/responses/{id}' + (cancel ?? '');
      requests.push(record);
      await readBody(req);
      const notFound = () => json(res, 404, openAiError(`Response with id '${id}' not found.`));
      if (cancel) {
        record.kind = 'cancel';
        if (req.method !== 'POST') return json(res, 405, openAiError('use POST'));
        if (!g) return notFound();
        g.cancel();
        return json(res, 200, g.stored());
      }
      if (req.method !== 'GET') return json(res, 405, openAiError('use GET'));
      const stream = url.searchParams.get('stream') === 'true';
      record.kind = stream ? 'reattach' : 'retrieve';
      if (!g || g.expired === 'response' || (stream && g.expired)) {
        if (g && stream) g.reattaches.push({ startingAfter: url.searchParams.get('starting_after'), refused: 404 });
        return notFound();
      }
      if (!stream) {
        g.retrieves += 1;
        return json(res, 200, g.stored());
      }
      const raw = url.searchParams.get('starting_after');
      if (raw !== null && !/^\d{1,15}$/.test(raw)) return json(res, 400, openAiError(`Invalid 'starting_after': ${JSON.stringify(raw)}.`));
      const after = raw === null ? -1 : Number(raw);
      g.reattaches.push({ startingAfter: raw === null ? null : after, perturbed: g.perturbAt !== null });
      return g.subscribe(res, { after });
    }

    const format = FORMATS[path];
    if (!format) return json(res, 404, { error: { message: `no mock at ${req.method} ${path}`, type: 'not_found' } });
    if (req.method !== 'POST') return json(res, 405, { error: { message: 'use POST', type: 'invalid_request_error' } });
    requests.push(record);
    record.body = await readBody(req);
    if (format !== responsesFormat || record.body?.background !== true) return streamResponse(format, record, res, holds.get(record.query.seed ?? '1'));

    // Background mode: the generation outlives this request.
    if (record.body.store === false) return json(res, 400, openAiError('Background mode requires `store` to be true.'));
    if (record.query.fail === 'http500') {
      record.fail = 'http500';
      return json(res, 500, format.http500);
    }
    const g = new Generation(format, record);
    generations.set(g.id, g);
    record.responseId = g.id;
    if (record.body.stream === true) g.subscribe(res, { create: true });
    else json(res, 200, g.stored());
    g.pace.resume();
  });
  // Streams must not be cut by Node's default request/keep-alive timeouts during slow tests.
  server.requestTimeout = 0;
  server.headersTimeout = 0;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      const { port: bound } = server.address();
      resolve({
        url: `http://${host}:${bound}`,
        close: () => new Promise((done) => {
          server.closeAllConnections();
          server.close(() => done());
        }),
      });
    });
  });
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const arg = (name, fallback) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 && process.argv[i + 1] ? process.argv[i + 1] : fallback;
  };
  const mock = await startMockServer({ port: Number(arg('port', 8788)), host: arg('host', '127.0.0.1') });
  console.log(`mock model listening on ${mock.url}`);
  const stop = () => mock.close().then(() => process.exit(0));
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}
