// rindle-streams producer helpers for a JavaScript producer (a Worker, or Node ≥ 20), with no
// dependencies. Vendor this file, or load it from the Worker at `/producer.js`. Types: producer.d.ts.
//
//   import { openStream, signStreamToken } from './producer.js';
//   const token = await signStreamToken({ secret: env.STREAM_JWT_SECRET, stream: messageId, scope: 'write' });
//   const stream = await openStream({ service: env.RINDLE, streamId: messageId, token, format: 'ui', meta: { chatId } });
//   const result = streamText({ model, messages, abortSignal: stream.signal });   // a cancel stops the model
//   ctx.waitUntil(stream.pipe(result.toUIMessageStream({ generateMessageId: () => messageId })));
//
// Or, where the route handler already answers the browser with the AI SDK's own response (the
// way `resumable-stream` plugs in), a copy of that response's SSE goes through rindle too:
//   return result.toUIMessageStreamResponse({
//     generateMessageId: () => messageId,
//     consumeSseStream: (sse) => ctx.waitUntil(stream.consumeSseStream(sse)),
//   });
//
// `pipe` sends the whole answer as ONE streaming append (the fast path), NDJSON-encoded for a
// `ui` stream, then closes the stream; an upstream that throws, or a UI `error` chunk, ends it
// with `fail` instead, so the row is never left `streaming`. A cancel (POST …/cancel from any
// reader) answers the streaming append at once with `cancelled: true`: `pipe` then stops reading
// the upstream, fires `stream.signal`, and closes (the row ends `cancelled`).
//
// Ids by construction: on a `ui` stream the `start` chunk's `messageId` is the stream id (the
// message row's id), so a replay replaces the message it belongs to instead of adding one. A
// `start` chunk without one gets it; one with another id is refused (`BadChunkError`).

/** A non-2xx answer of the stream API: `status`, the SPEC §4 `code` and its `message`. */
export class RindleError extends Error {
  constructor(status, code, message, body = {}) {
    super(`${code} (${status}): ${message}`);
    this.name = 'RindleError';
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

/** A chunk that cannot become one NDJSON line of a `ui` stream (SPEC §9 validation). */
export class BadChunkError extends TypeError {
  constructor(message, chunk) {
    super(message);
    this.name = 'BadChunkError';
    this.chunk = chunk;
  }
}

import { createSseParser } from './chat-transport.js';

export { readUIMessage } from './ui-message.js';

const encoder = new TextEncoder();

/** One NDJSON line for a UI message chunk: a JSON object whose `type` is a string. */
export function encodeUIChunk(chunk) {
  if (chunk === null || typeof chunk !== 'object' || Array.isArray(chunk)) {
    throw new BadChunkError(`a UI message chunk must be an object, got ${chunk === null ? 'null' : Array.isArray(chunk) ? 'an array' : typeof chunk}`, chunk);
  }
  if (typeof chunk.type !== 'string') throw new BadChunkError('a UI message chunk needs a string `type`', chunk);
  return `${JSON.stringify(chunk)}\n`;
}

/**
 * The encoder of a `ui` stream's chunks: `encodeUIChunk`, with the `start` chunk's `messageId`
 * set to the stream id when missing, and refused when it is another.
 */
function uiChunkEncoder(streamId) {
  return (chunk) => {
    if (chunk?.type === 'start') {
      if (chunk.messageId == null) return encodeUIChunk({ ...chunk, messageId: streamId });
      if (chunk.messageId !== streamId) {
        throw new BadChunkError(
          `the start chunk's messageId ${JSON.stringify(chunk.messageId)} is not the stream id ${JSON.stringify(streamId)}: a replay would add a second message (toUIMessageStream({ generateMessageId: () => streamId }))`,
          chunk,
        );
      }
    }
    return encodeUIChunk(chunk);
  };
}

/** The UI message chunks of the SSE text `toUIMessageStreamResponse` writes (its `consumeSseStream` copy). */
function chunksOfSse(sse) {
  let parser;
  return sse.pipeThrough(
    new TransformStream({
      start(controller) {
        parser = createSseParser(({ data }) => {
          if (data === undefined || data === '[DONE]') return;
          controller.enqueue(JSON.parse(data)); // the SDK wrote it with JSON.stringify
        });
      },
      transform(piece) {
        parser.push(typeof piece === 'string' ? piece : decoder.decode(piece, { stream: true }));
      },
    }),
  );
}

const decoder = new TextDecoder();
let warnedNoMessageId = false;

/**
 * The stream API of one rindle-streams deployment: through a service binding (`service`, a
 * Fetcher such as `env.RINDLE`) or over HTTP (`baseUrl`, e.g. `https://streams.example.com`).
 */
function endpoint({ service, baseUrl, prefix = '/streams', fetch: fetchImpl }) {
  if (!service && baseUrl == null) throw new TypeError('openStream: pass `service` (a service binding) or `baseUrl`');
  const origin = service ? 'https://rindle.internal' : String(baseUrl).replace(/\/+$/, '');
  const send = service ? (req) => service.fetch(req) : (req) => (fetchImpl ?? globalThis.fetch)(req);
  return (streamId, action) => (init) => send(new Request(`${origin}${prefix}/${encodeURIComponent(streamId)}/${action}`, init));
}

async function answer(res) {
  const raw = await res.text();
  let body;
  try {
    body = raw ? JSON.parse(raw) : {};
  } catch {
    body = {};
  }
  if (!res.ok) throw new RindleError(res.status, body.error ?? 'http_error', body.message ?? (raw.slice(0, 200) || res.statusText), body);
  return body;
}

/**
 * Open a stream whose message row the app has already inserted (SPEC §5) and return its
 * producer handle. `token` needs `write` scope for `streamId`.
 */
export async function openStream({ streamId, token, format = 'text', meta, ...where }) {
  if (format !== 'text' && format !== 'ui') throw new TypeError(`openStream: format must be "text" or "ui", got ${JSON.stringify(format)}`);
  const route = endpoint(where);
  const auth = { authorization: `Bearer ${token}` };
  const post = (action, body, headers = {}) =>
    route(streamId, action)({ method: 'POST', headers: { ...auth, ...headers }, body, ...(isStream(body) ? { duplex: 'half' } : {}) }).then(answer);
  const postJson = (action, value) => post(action, JSON.stringify(value), { 'content-type': 'application/json' });

  const opened = await postJson('open', meta === undefined ? { format } : { format, meta });
  const cancel = new AbortController();
  const learn = (reply) => {
    if (reply?.cancelled || reply?.status === 'cancelled') cancel.abort(new CancelledError(streamId));
    return reply;
  };
  const encode = format === 'ui' ? uiChunkEncoder(streamId) : encodeText;

  const stream = {
    streamId,
    format,
    /** The open answer: `{ streamId, seq, durableSeq }`. */
    opened,
    /** Fires when a reader cancelled the stream (learned from an append or close answer). */
    signal: cancel.signal,
    get cancelled() {
      return cancel.signal.aborted;
    },
    /** One plain append: a string (text) or one chunk / an array of chunks (ui). */
    append(value) {
      const text = Array.isArray(value) && format === 'ui' ? value.map(encode).join('') : encode(value);
      return post('append', text, { 'content-type': 'text/plain; charset=utf-8' }).then(learn);
    },
    /** Resolves once everything appended so far is committed to D1: `{ seq, durableSeq }`. */
    flush: () => post('flush'),
    /** Seal the stream: `{ status, seq, durableSeq }` (`cancelled` when a cancel was seen). */
    close: () => post('close').then(learn),
    /** Seal the stream as `error` with this message (`cancelled` when a cancel was seen). */
    fail: (error) => postJson('fail', { error: errorText(error) }).then(learn),

    /**
     * Send `source` (UI message chunks for `ui`, strings for `text`) as one streaming append,
     * then close, or fail on an upstream error. Resolves with the close/fail answer.
     */
    async pipe(source) {
      const reader = source.getReader();
      let upstreamError; // what ends the stream with `fail` instead of `close`
      let badChunk; // a chunk refused here: the append was cut short on purpose
      const body = new ReadableStream({
        async pull(controller) {
          let next;
          try {
            next = await reader.read();
          } catch (err) {
            upstreamError = err;
            controller.close();
            return;
          }
          if (next.done) return controller.close();
          let line;
          try {
            line = encode(next.value);
          } catch (err) {
            badChunk = err;
            reader.cancel(err).catch(() => {});
            controller.close();
            return;
          }
          // An `error` chunk is the AI SDK's way of saying the generation failed.
          if (format === 'ui' && next.value.type === 'error') upstreamError ??= next.value.errorText ?? 'the model stream reported an error';
          controller.enqueue(encoder.encode(line));
        },
        cancel(reason) {
          // The append answered before the body ended (a cancel): stop the model.
          return reader.cancel(reason).catch(() => {});
        },
      });
      let appended;
      try {
        appended = learn(await post('append', body, { 'content-type': 'text/plain; charset=utf-8' }));
      } catch (err) {
        // Never leave the row `streaming`. A reader's cancel answers the append at once, and the
        // connection can be torn down before fetch reads that answer: `fail` then seals
        // `cancelled` and says so, and the cancel is the outcome, not this error.
        const failed = await stream.fail(err).catch(() => undefined);
        reader.cancel(stream.cancelled ? cancel.signal.reason : err).catch(() => {});
        if (stream.cancelled) return failed;
        throw err;
      }
      if (appended.cancelled) reader.cancel(cancel.signal.reason).catch(() => {});
      if (badChunk) {
        await stream.fail(badChunk).catch(() => {});
        throw badChunk;
      }
      if (upstreamError !== undefined && !appended.cancelled) return stream.fail(upstreamError);
      return stream.close();
    },

    /**
     * `pipe` for the copy of the SSE that `toUIMessageStreamResponse({ consumeSseStream })`
     * hands over (`{ stream }`): its chunks go through rindle while the browser reads the
     * response. Keep the Worker alive for it: `(sse) => ctx.waitUntil(stream.consumeSseStream(sse))`.
     */
    consumeSseStream({ stream: sse }) {
      if (format !== 'ui') throw new TypeError('consumeSseStream: open the stream with format "ui"');
      const chunks = chunksOfSse(sse).pipeThrough(
        new TransformStream({
          transform(chunk, controller) {
            // The browser's copy of a start chunk without a messageId gets a client-made id, and
            // rindle's replay would then be a second message: say so once.
            if (chunk?.type === 'start' && chunk.messageId == null && !warnedNoMessageId) {
              warnedNoMessageId = true;
              console.warn(`rindle-streams: the start chunk of ${streamId} has no messageId; pass toUIMessageStreamResponse({ generateMessageId: () => streamId }) so a resumed replay replaces the message instead of adding one`);
            }
            controller.enqueue(chunk);
          },
        }),
      );
      return stream.pipe(chunks);
    },
  };
  return stream;
}

/** Raised as the reason of `stream.signal` when a reader cancelled the stream. */
export class CancelledError extends Error {
  constructor(streamId) {
    super(`stream ${streamId} was cancelled by a reader`);
    this.name = 'AbortError'; // what fetch, streamText and friends expect from an abort reason
    this.streamId = streamId;
  }
}

function encodeText(value) {
  if (typeof value !== 'string') throw new TypeError(`a text stream takes strings, got ${typeof value}`);
  return value;
}

function errorText(error) {
  if (typeof error === 'string') return error;
  if (error instanceof Error) return error.message || error.name;
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    return String(error);
  }
}

const isStream = (body) => typeof ReadableStream !== 'undefined' && body instanceof ReadableStream;

// ---------------------------------------------------------------------------------------
// Tokens

const b64url = (bytes) => {
  let s = '';
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
};
const b64urlJson = (value) => b64url(encoder.encode(JSON.stringify(value)));

/**
 * An HS256 token for the stream API (SPEC §4), signed with WebCrypto (Workers, browsers' server
 * side, Node ≥ 20). `stream` is an exact stream id or a prefix ending in `*`; `chat` (reads only,
 * with the chat column mapped) lets it read the answers of that chat, such as the stock AI SDK
 * transport's resume GET `{prefix}/chats/{chat}/stream`; `scope` is a space-separated string or
 * an array of `read`, `write`, `cancel`.
 */
export async function signStreamToken({ secret, stream, chat, scope, ttlSeconds = 3600, sub = 'app', now = Date.now() }) {
  if (typeof secret !== 'string' || secret.length < 16) throw new TypeError('signStreamToken: the secret must be a string of at least 16 characters');
  const named = (v) => typeof v === 'string' && v !== '';
  if (!named(stream) && !named(chat)) throw new TypeError('signStreamToken: `stream` or `chat` is required');
  const claims = { sub, ...(named(stream) ? { stream } : {}), ...(named(chat) ? { chat } : {}), scope: Array.isArray(scope) ? scope.join(' ') : scope, exp: Math.floor(now / 1000) + ttlSeconds };
  const input = `${b64urlJson({ alg: 'HS256', typ: 'JWT' })}.${b64urlJson(claims)}`;
  const key = await crypto.subtle.importKey('raw', encoder.encode(secret), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  const sig = new Uint8Array(await crypto.subtle.sign('HMAC', key, encoder.encode(input)));
  return `${input}.${b64url(sig)}`;
}
