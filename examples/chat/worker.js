// The example chat's producer Worker: the app side of "Using it with the AI SDK" (README,
// docs/AI-SDK.md). The page (page/main.jsx) runs either transport; both are served here.
//
//   POST /api/chat                    rindle transport: the AI SDK's request → inserts the rows,
//                                     opens a `ui` stream, starts the answer, answers {streamId, token}
//   POST /api/chat/stock              stock DefaultChatTransport: the same start, answered with the
//                                     AI SDK's own response (toUIMessageStreamResponse); a copy of
//                                     its SSE goes through rindle (consumeSseStream), so the
//                                     answer resumes from rindle after a reload or in a second tab
//   GET  /api/chat/:chatId/messages   the chat's history for the page's initial state, and the
//                                     answer in flight it leaves out, read in one transaction
//   GET  /api/chat/:chatId/stream     rindle transport's reconnect: ?answer= the answer the history
//                                     left out (whatever it has become since), else the chat's
//                                     answer in flight → {streamId, token}, or 204 (the transport
//                                     also asks it for a fresh token when an answer's expires)
//   GET  /api/chat/:chatId/token      a fresh token for the chat's feed → {chatToken} (a feed
//                                     connection ends at its token's exp; the page asks again)
//   /streams/*                        forwarded to rindle-streams (service binding RINDLE), so the
//                                     page has one origin
//   everything else                   the page (static assets in dist/, built by build.mjs)
//
// The answer comes from AI SDK `streamText` on a scripted mock model (answer.js): reasoning, a
// tool call with its result, then text. The app owns its message table (migrations/, or
// migrations/postgres/ with a HYPERDRIVE binding: store.js): it inserts the user and assistant
// rows before opening the stream (SPEC §5), and the insert itself refuses a second answer while
// one is in flight in the chat (no read-then-insert race). The open names the chat and the user's
// message, so the chat's feed announces the turn to every other tab (SPEC §11, chat-feed.js). A
// send never drops a message: only a regeneration or an edit replaces what followed its question,
// and only what the page showed (`seen`, the last message it showed; else 409 history_changed).
import { readUIMessageStream } from 'ai';
import { openStream, readUIMessage, RindleError, signStreamToken } from '../../public/producer.js';
import { seedOf, streamAnswer, uiStreamOptions } from './answer.js';
import { chatStore } from './store.js';

const CHAT_ID = /^[A-Za-z0-9._:-]{1,64}$/;

const json = (status, body) => Response.json(body, { status });
const fail = (status, error, message) => json(status, { error, message });

export default {
  async fetch(request, env, ctx) {
    const url = new URL(request.url);
    const path = url.pathname;
    if (path.startsWith('/streams/')) return env.RINDLE.fetch(request);
    try {
      if (path === '/api/chat' || path === '/api/chat/stock') {
        if (request.method !== 'POST') return fail(405, 'method_not_allowed', `POST ${path} starts an answer`);
        return await startAnswer(request, env, ctx, { stock: path === '/api/chat/stock' });
      }
      const m = /^\/api\/chat\/([^/]+)\/(stream|messages|token)$/.exec(path);
      if (m) {
        if (request.method !== 'GET') return fail(405, 'method_not_allowed', `GET ${path}`);
        const chatId = decodeURIComponent(m[1]);
        if (!CHAT_ID.test(chatId)) return fail(400, 'bad_chat_id', 'a chat id is 1-64 characters of [A-Za-z0-9._:-]');
        if (m[2] === 'token') return json(200, { chatToken: await chatToken(env, chatId) });
        const store = chatStore(env, ctx);
        return m[2] === 'stream' ? await answerToResume(store, chatId, url.searchParams.get('answer'), env) : await chatMessages(store, chatId, env);
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

/** How long the page's read tokens live (`READ_TOKEN_SECS`, default an hour; the tests use 20 s): a connection ends at its token's exp, and the page asks for a fresh one. */
const readTtl = (env) => Number(env.READ_TOKEN_SECS ?? 3600);
const readToken = (env, streamId) => signStreamToken({ secret: env.STREAM_JWT_SECRET, stream: streamId, scope: 'read cancel', ttlSeconds: readTtl(env) });
/** The chat's feed, and the stock page's resume GET for the chat (`/streams/chats/{chat}/stream`), need the chat's read. */
const chatToken = (env, chatId) => signStreamToken({ secret: env.STREAM_JWT_SECRET, chat: chatId, scope: 'read', ttlSeconds: readTtl(env) });

async function startAnswer(request, env, ctx, { stock }) {
  let body;
  try {
    body = await request.json();
  } catch {
    return fail(400, 'bad_json', 'the body must be the AI SDK chat request as JSON');
  }
  const { id: chatId, messages, trigger, messageId, seen } = body ?? {};
  if (typeof chatId !== 'string' || !CHAT_ID.test(chatId)) return fail(400, 'bad_chat_id', 'a chat id is 1-64 characters of [A-Za-z0-9._:-]');
  if (!Array.isArray(messages) || messages.length === 0) return fail(400, 'bad_messages', '`messages` must be a non-empty array');
  const question = messages.findLast((m) => m?.role === 'user');
  if (!question || typeof question.id !== 'string' || !Array.isArray(question.parts)) return fail(400, 'bad_messages', 'no user message with an id and parts');
  if (trigger !== 'submit-message' && trigger !== 'regenerate-message') return fail(400, 'bad_trigger', `unknown trigger ${JSON.stringify(trigger)}`);

  // A regeneration, or an edit of a question (the AI SDK's `messageId`), replaces what followed the
  // question; the page says the last message it showed (`seen`), so nothing it never showed goes.
  const replaces = trigger === 'regenerate-message' || typeof messageId === 'string';
  if (seen !== undefined && typeof seen !== 'string') return fail(400, 'bad_seen', '`seen` is the id of the last message the page showed');
  const answerId = `a-${crypto.randomUUID()}`;
  const keep = messages.map((m) => m?.id).filter((id) => typeof id === 'string');
  const text = question.parts.filter((p) => p?.type === 'text').map((p) => p.text).join('');
  // The user's message as the chat's feed announces it to the other tabs (SPEC §11).
  const userMessage = { id: question.id, role: 'user', parts: question.parts, ...(question.metadata === undefined ? {} : { metadata: question.metadata }) };
  // Tokens first: a misconfigured secret fails before anything is written.
  const writeToken = await signStreamToken({ secret: env.STREAM_JWT_SECRET, stream: answerId, scope: 'write' });
  const token = await readToken(env, answerId);
  // One transaction: the chat's history becomes what the client sent (a regenerate drops the old
  // answer), then the question and the answer's row, which must exist before the stream opens
  // (SPEC §5). Each statement applies only while no answer is in flight in the chat, so two
  // concurrent sends cannot both start one: the database decides, not a read before the insert.
  // Tests only (MOCK_HOLD_START=1 with MOCK_HOLD_URL): each send waits here, just before its writes,
  // until the test releases it, so a test lets concurrent sends reach the writes together.
  if (env.MOCK_HOLD_URL && env.MOCK_HOLD_START === '1') await fetch(`${env.MOCK_HOLD_URL}/start-${question.id}`).then((res) => res.arrayBuffer());
  // Tests only (MOCK_HOLD_COMMIT=1 with MOCK_HOLD_URL, Postgres): a send that inserted its answer
  // waits before its commit until the test releases it, so a test holds concurrent sends inside
  // their transactions, where only the database can keep two from both inserting.
  const beforeCommit = env.MOCK_HOLD_URL && env.MOCK_HOLD_COMMIT === '1' ? () => fetch(`${env.MOCK_HOLD_URL}/commit-${question.id}`).then((res) => res.arrayBuffer()) : undefined;
  const store = chatStore(env, ctx);
  const started = await store.startAnswer({ chatId, keep, seen: seen ?? null, replaces, questionId: question.id, question: JSON.stringify({ id: question.id, role: 'user', parts: question.parts }), answerId, beforeCommit });
  if (started === 'busy') return fail(409, 'answer_in_progress', 'the chat is still answering; stop it or wait');
  if (started === 'stale') return fail(409, 'history_changed', 'the chat has messages this page has not shown yet; nothing was replaced');

  let stream;
  try {
    // A reset of rindle's object (a deploy, an eviction) mid-answer: the helpers resume and
    // re-send by themselves (SPEC §10); the hook only logs it.
    const onResume = ({ cause, seq, resent }) => console.log(`producer_resumed ${answerId} ${cause} ${seq} ${resent}`);
    stream = await openStream({ service: env.RINDLE, streamId: answerId, token: writeToken, format: 'ui', meta: { chatId }, chat: { id: chatId, userMessage }, onResume });
  } catch (err) {
    // No answer will come: drop its row rather than leave it `pending` (it would block the chat).
    await store.dropUnopened(answerId);
    throw err;
  }
  const seed = seedOf(text);
  const words = Number(env.MOCK_WORDS ?? 40);
  const result = streamAnswer({
    seed,
    kind: 'full',
    words,
    delayMs: Number(env.MOCK_DELAY_MS ?? 40),
    prompt: text || 'Hello',
    abortSignal: stream.signal, // a reader's cancel stops the model call
    onStop: (why) => console.log(`model_stopped ${answerId} ${why}`),
    // Tests only (unset otherwise): the mock model holds the answer before its end until this
    // URL answers, so a test acts mid-answer by the answer's state, not by the model's clock.
    holdEnd: env.MOCK_HOLD_URL ? () => fetch(`${env.MOCK_HOLD_URL}/${answerId}`, { signal: stream.signal }).then((res) => res.arrayBuffer()) : undefined,
  });
  const logEnd = (end) => end.then(
    (e) => console.log(`answer_end ${answerId} ${e.status}`),
    (err) => console.error(`answer_failed ${answerId} ${err?.message ?? err}`),
  );
  if (stock) {
    // The AI SDK answers the browser itself; rindle gets a copy of the same SSE.
    return result.toUIMessageStreamResponse({
      ...uiStreamOptions(answerId),
      consumeSseStream: (sse) => ctx.waitUntil(logEnd(stream.consumeSseStream(sse))),
    });
  }
  ctx.waitUntil(logEnd(stream.pipe(result.toUIMessageStream(uiStreamOptions(answerId)))));
  return json(200, { streamId: answerId, token });
}

/**
 * The rindle transport's reconnect. `answer`: the answer the page's history left out (it was in
 * flight when the history was read): it is resumed whatever it has become since (its /ui replays
 * a finished answer from the store, and waits for one not opened yet), so it cannot be missed.
 * Without it, the chat's answer in flight now (one another tab started), or 204.
 */
async function answerToResume(store, chatId, answer, env) {
  const id = await store.answerToResume(chatId, answer);
  if (!id) return new Response(null, { status: 204 });
  return json(200, { streamId: id, token: await readToken(env, id) });
}

/**
 * The chat's messages for the page's initial state, and the answer in flight they leave out
 * (`active`, which the page resumes), read in ONE transaction (store.js), so an answer is in
 * exactly one of the two: it cannot end between the two reads and be in neither. An answer's
 * message is built from its row (the body, then any chunk rows: an answer too large to compact
 * keeps them) by the same assembly as the page's reader (`readUIMessage`).
 */
async function chatMessages(store, chatId, env) {
  const { rows, chunks } = await store.history(chatId);
  const messages = [];
  let active = null;
  for (const row of rows) {
    if (row.role === 'user') messages.push(JSON.parse(row.body));
    else if (row.in_flight) active = { streamId: row.id, token: await readToken(env, row.id) };
    else if (row.status !== 'pending') {
      const rowChunks = chunks.filter((c) => c.streamId === row.id);
      messages.push(await readUIMessage({ row: { id: row.id, body: row.body, chunks: rowChunks }, readUIMessageStream }));
    }
  }
  return json(200, { messages, active, chatToken: await chatToken(env, chatId) });
}
