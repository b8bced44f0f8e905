#!/usr/bin/env node
// A mock of three streaming model APIs, for development and tests. Node 20, node:http only.
//
//   node mock/model-server.mjs --port 8788 [--host 127.0.0.1]
//   import { startMockServer } from './mock/model-server.mjs';
//   const mock = await startMockServer({ port: 0 });  // → { url, close() }
//
// Endpoints (any request body is accepted and recorded; the answer is always a stream):
//   POST /v1/chat/completions   OpenAI Chat Completions, `data: {chunk}` lines, then `data: [DONE]`
//   POST /v1/responses          OpenAI Responses, `event: response.*` events
//   POST /v1/messages           Anthropic Messages, `event: message_start` … `message_stop`, pings
//   GET  /_mock/requests        every request so far: [{ id, path, query, authorization,
//                               tokensSent, completed, aborted, fail, body }]
//   POST /_mock/reset           forget them
//
// Query options (the caller controls the mock through the upstream URL it hands the Worker):
//   tokens=120   how many tokens (the text is mockText({ seed, tokens }) from ./mock-text.mjs)
//   rate=40      tokens per second; 0 sends as fast as the socket takes them
//   seed=1       which deterministic text
//   fail=        error     the API's own error event at failAt, then the response ends
//                drop      the socket is destroyed at failAt (no terminator, no error)
//                malformed a `data:` line that is not JSON at failAt, then the stream CONTINUES
//                          normally, so the consumer's policy (skip or fail) decides the outcome
//                stall     sending stops at failAt and the connection stays open
//                http500   a 500 with the API's JSON error body, at once
//   failAt=      token index of the failure (default: half of `tokens`)
//
// `aborted` is true when the CLIENT closed the connection before the end: that is how a test
// proves a cancel reached the upstream. A `drop` is the server's doing and is not an abort.

import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { mockTokens } from './mock-text.mjs';

const MODEL = { openai: 'gpt-4o-mini-2024-07-18', anthropic: 'claude-3-5-haiku-20241022' };

/** An SSE event as the real APIs write it: an optional `event:` line and one `data:` line. */
function sse(event, data) {
  const payload = typeof data === 'string' ? data : JSON.stringify(data);
  return `${event ? `event: ${event}\n` : ''}data: ${payload}\n\n`;
}

// Each format: `start` events, one `delta` event per token, `end` events, its own mid-stream
// `error` event, a `malformed` event (named like a delta, so a parser that dispatches on the event
// name still meets it) and its HTTP 500 body. `ctx` = { id, msgId, created, text (so far), n (tokens),
// sent (tokens so far), sequence (the Responses API's event counter) }.
const FORMATS = {
  '/v1/chat/completions': (() => {
    const chunk = (ctx, delta, finish = null) => sse(null, {
      id: ctx.id, object: 'chat.completion.chunk', created: ctx.created, model: MODEL.openai,
      system_fingerprint: 'fp_mock', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    });
    const error = { error: { message: 'The server had an error while processing your request.', type: 'server_error', param: null, code: null } };
    return {
      idPrefix: 'chatcmpl-',
      start: (ctx) => [chunk(ctx, { role: 'assistant', content: '', refusal: null })],
      delta: (ctx, text) => chunk(ctx, { content: text }),
      end: (ctx) => [chunk(ctx, {}, 'stop'), sse(null, '[DONE]')],
      error: () => sse(null, error),
      malformed: 'data: {"choices": [{"delta": {"content": "unterminated\n\n',
      http500: error,
    };
  })(),

  '/v1/responses': (() => {
    const ev = (ctx, type, fields) => sse(type, { type, sequence_number: ctx.sequence++, ...fields });
    const response = (ctx, status, output = []) => ({
      id: ctx.id, object: 'response', created_at: ctx.created, status, error: null,
      model: MODEL.openai, output, usage: status === 'completed'
        ? { input_tokens: 12, output_tokens: ctx.n, total_tokens: 12 + ctx.n } : null,
    });
    const message = (ctx, status) => ({
      id: ctx.msgId, type: 'message', status, role: 'assistant',
      content: status === 'completed' ? [{ type: 'output_text', text: ctx.text, annotations: [] }] : [],
    });
    const at = (ctx) => ({ item_id: ctx.msgId, output_index: 0, content_index: 0 });
    return {
      idPrefix: 'resp_',
      start: (ctx) => [
        ev(ctx, 'response.created', { response: response(ctx, 'in_progress') }),
        ev(ctx, 'response.in_progress', { response: response(ctx, 'in_progress') }),
        ev(ctx, 'response.output_item.added', { output_index: 0, item: message(ctx, 'in_progress') }),
        ev(ctx, 'response.content_part.added', { ...at(ctx), part: { type: 'output_text', text: '', annotations: [] } }),
      ],
      delta: (ctx, text) => ev(ctx, 'response.output_text.delta', { ...at(ctx), delta: text, logprobs: [] }),
      end: (ctx) => [
        ev(ctx, 'response.output_text.done', { ...at(ctx), text: ctx.text, logprobs: [] }),
        ev(ctx, 'response.content_part.done', { ...at(ctx), part: { type: 'output_text', text: ctx.text, annotations: [] } }),
        ev(ctx, 'response.output_item.done', { output_index: 0, item: message(ctx, 'completed') }),
        ev(ctx, 'response.completed', { response: response(ctx, 'completed', [message(ctx, 'completed')]) }),
      ],
      error: (ctx) => ev(ctx, 'error', { code: 'server_error', message: 'The server had an error while processing your request.', param: null }),
      malformed: 'event: response.output_text.delta\ndata: {"type": "response.output_text.delta", "delta": \n\n',
      http500: { error: { message: 'The server had an error while processing your request.', type: 'server_error', param: null, code: 'server_error' } },
    };
  })(),

  '/v1/messages': (() => {
    const ev = (type, fields = {}) => sse(type, { type, ...fields });
    return {
      idPrefix: 'msg_',
      start: (ctx) => [
        ev('message_start', { message: { id: ctx.id, type: 'message', role: 'assistant', model: MODEL.anthropic, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 12, output_tokens: 1 } } }),
        ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
        ev('ping'),
      ],
      // A ping every 25 tokens, as the real API interleaves them, so parsers must skip them.
      delta: (ctx, text) => (ctx.sent > 0 && ctx.sent % 25 === 0 ? ev('ping') : '') +
        ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text } }),
      end: (ctx) => [
        ev('content_block_stop', { index: 0 }),
        ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: ctx.n } }),
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

/** Stream one model response, token by token, honouring the failure options. */
function streamResponse(format, record, res) {
  const q = record.query;
  const n = intParam(q, 'tokens', 120);
  const rate = intParam(q, 'rate', 40);
  const fail = FAILS.has(q.fail) ? q.fail : null;
  const failAt = Math.min(intParam(q, 'failAt', Math.floor(n / 2)), n);
  const tokens = mockTokens({ seed: intParam(q, 'seed', 1), tokens: n });
  const uid = () => randomUUID().replaceAll('-', '');
  const ctx = { id: `${format.idPrefix}${uid()}`, msgId: `msg_${uid()}`, created: Math.floor(Date.now() / 1000), text: '', n, sent: 0, sequence: 0 };

  if (fail === 'http500') {
    record.fail = fail;
    return json(res, 500, format.http500);
  }

  let timer = null;
  let dropped = false;
  res.on('close', () => {
    clearTimeout(timer);
    clearImmediate(timer);
    if (!res.writableFinished && !dropped) record.aborted = true;
  });

  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
  });
  res.socket?.setNoDelay(true);
  for (const event of format.start(ctx)) res.write(event);

  const step = () => {
    if (res.destroyed) return;
    if (fail && ctx.sent === failAt) {
      record.fail = fail;
      if (fail === 'error') return res.end(format.error(ctx));
      if (fail === 'drop') {
        dropped = true;
        return res.socket.destroy();
      }
      if (fail === 'stall') return;
      if (fail === 'malformed') res.write(format.malformed);
    }
    if (ctx.sent === n) {
      for (const event of format.end(ctx)) res.write(event);
      record.completed = true;
      return res.end();
    }
    const token = tokens[ctx.sent];
    res.write(format.delta(ctx, token));
    ctx.text += token;
    ctx.sent += 1;
    record.tokensSent = ctx.sent;
    timer = rate > 0 ? setTimeout(step, 1000 / rate) : setImmediate(step);
  };
  step();
}

/** Start the mock. `port: 0` picks a free port. Resolves once it is listening. */
export function startMockServer({ port = 0, host = '127.0.0.1' } = {}) {
  let requests = [];
  let nextId = 1;
  const server = createServer(async (req, res) => {
    const url = new URL(req.url, 'http://mock.invalid');
    const path = url.pathname;
    if (req.method === 'GET' && path === '/_mock/requests') return json(res, 200, requests);
    if (req.method === 'POST' && path === '/_mock/reset') {
      requests = [];
      return json(res, 200, { ok: true });
    }
    const format = FORMATS[path];
    if (!format) return json(res, 404, { error: { message: `no mock at ${req.method} ${path}`, type: 'not_found' } });
    if (req.method !== 'POST') return json(res, 405, { error: { message: 'use POST', type: 'invalid_request_error' } });
    const record = {
      id: nextId++,
      path,
      query: Object.fromEntries(url.searchParams),
      authorization: Boolean(req.headers.authorization || req.headers['x-api-key']),
      tokensSent: 0,
      completed: false,
      aborted: false,
      fail: null,
      body: null,
    };
    requests.push(record);
    record.body = await readBody(req);
    streamResponse(format, record, res);
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
