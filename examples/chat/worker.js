// The example chat's producer Worker: the app side of "Using it with the AI SDK" (README).
//
//   POST /api/chat                    the AI SDK's request → inserts the rows, opens a `ui`
//                                     stream, starts the answer, answers {streamId, token}
//   GET  /api/chat/:chatId/stream     the chat's answer still streaming → {streamId, token}, or 204
//   GET  /api/chat/:chatId/messages   the chat's finished messages, as UI messages (initial state)
//   /streams/*                        forwarded to rindle-streams (service binding RINDLE), so the
//                                     page has one origin
//   everything else                   the page (static assets in dist/, built by build.mjs)
//
// The answer comes from AI SDK `streamText` on a scripted mock model (answer.js): reasoning, a
// tool call with its result, then text. The app owns its message table (migrations/): it
// inserts the user and assistant rows before opening the stream, as SPEC §5 requires.
import { readUIMessageStream } from 'ai';
import { openStream, RindleError, signStreamToken } from '../../public/producer.js';
import { seedOf, streamAnswer, uiStreamOptions } from './answer.js';

const CHAT_ID = /^[A-Za-z0-9._:-]{1,64}$/;

const json = (status, body) => Response.json(body, { status });
const fail = (status, error, message) => json(status, { error, message });

export default {
  async fetch(request, env, ctx) {
    const url = new URL(request.url);
    const path = url.pathname;
    if (path.startsWith('/streams/')) return env.RINDLE.fetch(request);
    try {
      if (path === '/api/chat') {
        if (request.method !== 'POST') return fail(405, 'method_not_allowed', 'POST /api/chat starts an answer');
        return await startAnswer(request, env, ctx);
      }
      const m = /^\/api\/chat\/([^/]+)\/(stream|messages)$/.exec(path);
      if (m) {
        if (request.method !== 'GET') return fail(405, 'method_not_allowed', `GET ${path}`);
        const chatId = decodeURIComponent(m[1]);
        if (!CHAT_ID.test(chatId)) return fail(400, 'bad_chat_id', 'a chat id is 1-64 characters of [A-Za-z0-9._:-]');
        return m[2] === 'stream' ? await activeStream(chatId, env) : await chatMessages(chatId, env);
      }
      return fail(404, 'not_found', `no route for ${path}`);
    } catch (err) {
      console.error('chat_error', err?.stack ?? err);
      // The stream API refused (e.g. 503 store_unavailable): a bad gateway, with its reason.
      if (err instanceof RindleError) return json(502, { error: 'stream_api', code: err.code, message: err.message });
      return fail(500, 'internal', err?.message ?? String(err));
    }
  },
};

const readScopeToken = (env, streamId) => signStreamToken({ secret: env.STREAM_JWT_SECRET, stream: streamId, scope: 'read cancel' });

async function startAnswer(request, env, ctx) {
  let body;
  try {
    body = await request.json();
  } catch {
    return fail(400, 'bad_json', 'the body must be the AI SDK chat request as JSON');
  }
  const { id: chatId, messages, trigger } = body ?? {};
  if (typeof chatId !== 'string' || !CHAT_ID.test(chatId)) return fail(400, 'bad_chat_id', 'a chat id is 1-64 characters of [A-Za-z0-9._:-]');
  if (!Array.isArray(messages) || messages.length === 0) return fail(400, 'bad_messages', '`messages` must be a non-empty array');
  const question = messages.findLast((m) => m?.role === 'user');
  if (!question || typeof question.id !== 'string' || !Array.isArray(question.parts)) return fail(400, 'bad_messages', 'no user message with an id and parts');
  if (trigger !== 'submit-message' && trigger !== 'regenerate-message') return fail(400, 'bad_trigger', `unknown trigger ${JSON.stringify(trigger)}`);

  const busy = await env.DB.prepare(`SELECT id FROM messages WHERE chat_id = ? AND status = 'streaming' LIMIT 1`).bind(chatId).first();
  if (busy) return fail(409, 'answer_in_progress', `the chat is still answering (${busy.id}); stop it or wait`);

  const answerId = `a-${crypto.randomUUID()}`;
  const keep = messages.map((m) => m?.id).filter((id) => typeof id === 'string');
  const text = question.parts.filter((p) => p?.type === 'text').map((p) => p.text).join('');
  // Tokens first: a misconfigured secret fails before anything is written.
  const writeToken = await signStreamToken({ secret: env.STREAM_JWT_SECRET, stream: answerId, scope: 'write' });
  const readToken = await readScopeToken(env, answerId);
  // The chat's history becomes what the client sent (a regenerate drops the old answer); then
  // the question and the answer's row, which must exist before the stream opens (SPEC §5).
  await env.DB.batch([
    env.DB.prepare(`DELETE FROM messages WHERE chat_id = ? AND id NOT IN (SELECT value FROM json_each(?))`).bind(chatId, JSON.stringify(keep)),
    env.DB.prepare(`INSERT OR IGNORE INTO messages (id, chat_id, role, body, status) VALUES (?, ?, 'user', ?, 'complete')`)
      .bind(question.id, chatId, JSON.stringify({ id: question.id, role: 'user', parts: question.parts })),
    env.DB.prepare(`INSERT INTO messages (id, chat_id, role) VALUES (?, ?, 'assistant')`).bind(answerId, chatId),
  ]);
  let stream;
  try {
    stream = await openStream({ service: env.RINDLE, streamId: answerId, token: writeToken, format: 'ui', meta: { chatId } });
  } catch (err) {
    // No answer will come: drop its row rather than leave it `pending`.
    await env.DB.prepare(`DELETE FROM messages WHERE id = ? AND status = 'pending'`).bind(answerId).run();
    throw err;
  }
  const result = streamAnswer({
    seed: seedOf(text),
    kind: 'full',
    words: Number(env.MOCK_WORDS ?? 40),
    delayMs: Number(env.MOCK_DELAY_MS ?? 40),
    prompt: text || 'Hello',
    abortSignal: stream.signal, // a reader's cancel stops the model call
    onStop: (why) => console.log(`model_stopped ${answerId} ${why}`),
    // Tests only (unset otherwise): the mock model holds the answer before its end until this
    // URL answers, so a test acts mid-answer by the answer's state, not by the model's clock.
    holdEnd: env.MOCK_HOLD_URL ? () => fetch(`${env.MOCK_HOLD_URL}/${answerId}`, { signal: stream.signal }).then((res) => res.arrayBuffer()) : undefined,
  });
  ctx.waitUntil(
    stream.pipe(result.toUIMessageStream(uiStreamOptions(answerId))).then(
      (end) => console.log(`answer_end ${answerId} ${end.status}`),
      (err) => console.error(`answer_failed ${answerId} ${err?.message ?? err}`),
    ),
  );
  return json(200, { streamId: answerId, token: readToken });
}

async function activeStream(chatId, env) {
  const row = await env.DB.prepare(
    `SELECT id FROM messages WHERE chat_id = ? AND role = 'assistant' AND status = 'streaming' ORDER BY created_at DESC, rowid DESC LIMIT 1`,
  ).bind(chatId).first();
  if (!row) return new Response(null, { status: 204 });
  return json(200, { streamId: row.id, token: await readScopeToken(env, row.id) });
}

/**
 * The chat's messages for the page's initial state. An answer still streaming is left out: the
 * page's `useChat({ resume: true })` replays it whole through the transport.
 */
async function chatMessages(chatId, env) {
  const { results } = await env.DB.prepare(
    `SELECT id, role, body, status FROM messages WHERE chat_id = ? ORDER BY created_at, rowid`,
  ).bind(chatId).all();
  const messages = [];
  for (const row of results) {
    if (row.role === 'user') messages.push(JSON.parse(row.body));
    else if (row.status !== 'streaming' && row.status !== 'pending') messages.push(await messageFromText(row.id, row.body, env));
  }
  return json(200, { messages });
}

/** Rebuild an answer's UI message from its stored NDJSON text (body, then any chunk rows). */
async function messageFromText(id, body, env) {
  const { results: chunks } = await env.DB.prepare(`SELECT text FROM message_chunks WHERE streamId = ? ORDER BY seq`).bind(id).all();
  const text = (body ?? '') + chunks.map((c) => c.text).join('');
  const lines = text.split('\n').slice(0, -1).filter(Boolean); // a last line without \n never became a chunk
  const stream = new ReadableStream({
    start(controller) {
      for (const line of lines) controller.enqueue(JSON.parse(line));
      controller.close();
    },
  });
  let message = { id, role: 'assistant', parts: [] };
  for await (const snapshot of readUIMessageStream({ stream, message, onError: () => {} })) message = snapshot;
  return message;
}
