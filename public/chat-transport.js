// rindle-streams ChatTransport for the AI SDK's `useChat`, with no dependencies. Vendor this file
// (with ui-message.js and client.js, which it imports), or load it from the Worker at
// `/chat-transport.js`. Types: chat-transport.d.ts.
//
// AI SDK versions: the transport works with ai 5 and later; a replay after a reload or in a second
// tab is free of duplicated parts with ai >= 7.0.137, which reads the transport's
// `resumeStreamIsReplay` and starts the message over at the replay's `start` chunk (7.0.61-7.0.136
// replace the message only when it is the page's last one; earlier versions replay onto a copy of
// it). The transport warns once, in the console, when the SDK that resumed did not read it.
//
//   import { useChat } from '@ai-sdk/react';
//   import { RindleChatTransport } from './chat-transport.js';
//   const transport = new RindleChatTransport({ api: '/api/chat' });
//   const chat = useChat({ id: chatId, messages: initialMessages, transport, resume: true });
//
// The app's chat endpoint (`api`) starts the answer and says where it streams:
//   POST {api}                  AI SDK body {id, messages, trigger, messageId, …} → {streamId, token}
//   GET  {api}/{chatId}/stream  the chat's active answer → {streamId, token}, or 204 when none;
//                               `?answer={streamId}`: that answer of the chat, whatever it has
//                               become (a turn its feed announced: chat-feed.js)
// The token needs `read cancel` scope for that stream. The transport then reads
// GET {streamsUrl}{prefix}/{streamId}/ui (SPEC §9) with a fetch-based SSE reader:
//   * a dropped connection is resumed here from the last `id:` (`?from=`), so the AI SDK never
//     sees a gap or a repeat; reconnects back off exponentially with jitter;
//   * a connection ends at its token's `exp` (the server closes it): the reconnect carries a fresh
//     token, which the transport asks the app's endpoint for (`GET {api}/{chatId}/stream?answer=`)
//     when the one it holds is about to expire or was refused;
//   * the stream handed to the AI SDK always ends with `finish`, `abort` or `error`: the server's
//     ending, or an `error` chunk when the stream cannot be reached for `giveUpAfterMs`. When
//     the chunks it delivered go past what was made durable (the object lost with an unsaved
//     tail, a seal that fell short), the server's ending is an `error` that says what was saved:
//     a UI message cannot take chunks back, and a reload shows exactly the saved answer;
//   * `stop()` (the abort signal, once the answer is streaming) POSTs …/cancel, so the producer
//     stops and every reader gets `abort`;
//   * `reconnectToStream` replays the active answer from offset 0 (`resumeStreamIsReplay`).

export { readUIMessage, uiChunksOf } from './ui-message.js';

/** The `id:` of a `/ui` ending's first event (not an offset: the ending is not part of the text). */
const ENDED_ID = 'done';
/**
 * Give up after this long without getting anything through, when the server did not say its
 * LEASE_MS; when it did (`x-rindle-lease-ms`), twice that plus 5 s, so a stream whose object was
 * lost is sealed and its ending ("only part of the answer shown was saved …") reaches the page
 * before the transport gives up.
 */
const DEFAULT_GIVE_UP_MS = 30_000;
const giveUpAfterLease = (leaseMs) => 2 * leaseMs + 5_000;
const DEFAULT_RETRY = { initialDelayMs: 250, maxDelayMs: 4000 };
/** A token this close to its `exp` is renewed before a connection rather than sent. */
const TOKEN_MARGIN_MS = 5_000;

/** The app's chat endpoint or the stream API answered with an error. */
export class ChatTransportError extends Error {
  constructor(message, { status, code, url } = {}) {
    super(message);
    this.name = 'ChatTransportError';
    this.status = status;
    this.code = code;
    this.url = url;
  }
}

const abortError = (reason) =>
  reason instanceof Error && reason.name === 'AbortError' ? reason : Object.assign(new Error('The request was aborted'), { name: 'AbortError' });

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });

/**
 * When a JWT expires (its `exp`, in ms), read without verifying it (the server verifies); `undefined`
 * for anything that is not a JWT with a numeric `exp`.
 */
export function tokenExpiresAt(token) {
  try {
    const payload = String(token).split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    const exp = JSON.parse(atob(payload)).exp;
    return typeof exp === 'number' ? exp * 1000 : undefined;
  } catch {
    return undefined;
  }
}

/** A token given as a string or a function (`reason`: `'refused'` after a 401/403), resolved now. */
const tokenNow = async (token, reason) => (typeof token === 'function' ? token(reason) : token);

/** Parses an SSE body incrementally (WHATWG rules) and calls `onEvent({ id, data, retry })`. */
export function createSseParser(onEvent) {
  let buffer = '';
  let data;
  let id;
  let retry;
  const dispatch = () => {
    if (data !== undefined || id !== undefined || retry !== undefined) onEvent({ id, data, retry });
    data = id = retry = undefined;
  };
  const line = (text) => {
    if (text === '') return dispatch();
    if (text.startsWith(':')) return; // a comment (keep-alive ping)
    const colon = text.indexOf(':');
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? '' : text.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') data = data === undefined ? value : `${data}\n${value}`;
    else if (field === 'id' && !value.includes('\0')) id = value;
    else if (field === 'retry' && /^\d+$/.test(value)) retry = Number(value);
  };
  return {
    push(text) {
      buffer += text;
      let start = 0;
      for (;;) {
        const cr = buffer.indexOf('\r', start);
        const lf = buffer.indexOf('\n', start);
        if (cr < 0 && lf < 0) break;
        const end = cr < 0 ? lf : lf < 0 ? cr : Math.min(cr, lf);
        if (end === cr && end === buffer.length - 1) break; // a CR that may be half of CRLF
        line(buffer.slice(start, end));
        start = end + (end === cr && buffer[end + 1] === '\n' ? 2 : 1);
      }
      buffer = buffer.slice(start);
    },
    /** Forget a partial event (the connection it came on is gone). */
    reset() {
      buffer = '';
      data = id = retry = undefined;
    },
  };
}

/**
 * Read a `ui` stream (GET …/ui) as a `ReadableStream` of UI message chunks, from `from` to its
 * ending, across dropped connections. Every chunk is delivered once and in order; the stream
 * always ends with a `finish`, `abort` or `error` chunk (the last one synthesized here when the
 * stream API cannot be reached for `retry.giveUpAfterMs`).
 */
export function readUIStream({
  streamId,
  token,
  streamsUrl = '',
  prefix = '/streams',
  from = 0,
  fetch: fetchImpl,
  credentials,
  retry = {},
  onReconnect,
}) {
  const policy = { ...DEFAULT_RETRY, ...retry };
  const doFetch = fetchImpl ?? ((...args) => globalThis.fetch(...args));
  const base = `${String(streamsUrl).replace(/\/+$/, '')}${prefix}/${encodeURIComponent(streamId)}/ui`;
  const stop = new AbortController(); // the consumer cancelled
  let position = from; // the `id:` of the last chunk delivered: where a reconnect resumes
  let serverRetryMs;
  let serverLeaseMs; // the server's LEASE_MS, from its first answer
  let ended = false;
  let roomAvailable; // resolves the wait for room in the queue (see `room`)

  return new ReadableStream({
    // The read loop runs on its own: a stream calls `pull` (which makes room) only once `start`
    // has returned.
    start(controller) {
      run(controller).catch((err) => {
        try {
          controller.error(err);
        } catch {
          // already closed or cancelled
        }
      });
    },
    pull() {
      roomAvailable?.();
      roomAvailable = undefined;
    },
    cancel(reason) {
      ended = true;
      stop.abort(reason);
      roomAvailable?.();
    },
  });

  async function run(controller) {
    let failures = 0;
    let disconnectedAt; // when the current run of failed attempts began
    let lastProblem = '';
    const deliver = (chunk) => {
      if (!ended) controller.enqueue(chunk);
    };
    // Backpressure: read the next piece of the body only once the consumer has room for
    // more, so a slow consumer holds the network, not this stream's queue.
    const room = () =>
      controller.desiredSize > 0 || stop.signal.aborted ? undefined : new Promise((resolve) => (roomAvailable = resolve));

    let refused; // the last attempt was denied (401/403): the token function is asked for a fresh one
    while (!ended && !stop.signal.aborted) {
      let progressed = false;
      try {
        const t = await tokenNow(token, refused);
        const url = `${base}?from=${position}${t == null ? '' : `&token=${encodeURIComponent(t)}`}`;
        const res = await doFetch(url, { headers: { accept: 'text/event-stream' }, credentials, signal: stop.signal, cache: 'no-store' });
        if (res.status === 204) {
          // Nothing more to read (the server says this reader has the ending already).
          ended = true;
          break;
        }
        if (!res.ok) {
          const detail = await errorDetail(res);
          const message = `stream ${streamId}: ${res.status} ${detail.code ?? ''} ${detail.message ?? ''}`.replace(/\s+/g, ' ').trim();
          // A denial with a token function: its token may have expired; one more try with a fresh one.
          const denied = res.status === 401 || res.status === 403;
          if (denied && typeof token === 'function' && !refused) {
            refused = 'refused';
            throw new ChatTransportError(message, { status: res.status, code: detail.code, url: base });
          }
          // 408, 429 and 5xx are worth another try; anything else will not change.
          if (res.status !== 408 && res.status !== 429 && res.status < 500) {
            deliver({ type: 'error', errorText: message });
            break;
          }
          throw new ChatTransportError(message, { status: res.status, code: detail.code, url: base });
        }
        if (!res.body) throw new ChatTransportError(`stream ${streamId}: the response has no body`, { url: base });
        const lease = Number(res.headers.get('x-rindle-lease-ms'));
        if (lease > 0) serverLeaseMs = lease;
        const done = await readEvents(res.body, stop.signal, room, (event) => {
          if (event.retry !== undefined) serverRetryMs = event.retry;
          if (event.data === undefined) return false;
          // The ending's first event carries `id: done`; `[DONE]` closes the answer.
          const ending = event.id === ENDED_ID;
          if (event.data === '[DONE]') return true;
          let chunk;
          try {
            chunk = JSON.parse(event.data);
          } catch {
            return false; // the server validates every line; skip anything else
          }
          if (!ending && event.id !== undefined) {
            const at = Number(event.id);
            if (!(at > position)) return false; // already delivered (never expected: belt and braces)
            position = at;
          }
          progressed = true;
          refused = undefined;
          failures = 0;
          disconnectedAt = undefined;
          deliver(chunk);
          if (ending) ended = true;
          return ended;
        });
        if (done) ended = true;
        lastProblem = 'the connection closed before the stream ended';
      } catch (err) {
        if (stop.signal.aborted) break;
        lastProblem = err?.message ?? String(err);
      }
      if (ended || stop.signal.aborted) break;
      // Reconnect from `position`: the first time after a connection that delivered something
      // within [0, initial) ms, then with exponential backoff (jittered) while attempts fail.
      if (!progressed) failures += 1;
      disconnectedAt ??= Date.now();
      const waited = Date.now() - disconnectedAt;
      const giveUpAfterMs = retry.giveUpAfterMs ?? (serverLeaseMs ? giveUpAfterLease(serverLeaseMs) : DEFAULT_GIVE_UP_MS);
      if (waited >= giveUpAfterMs) {
        deliver({ type: 'error', errorText: `stream ${streamId}: gave up reconnecting after ${Math.round(waited / 1000)} s (${lastProblem})` });
        break;
      }
      const initial = retry.initialDelayMs ?? serverRetryMs ?? policy.initialDelayMs;
      const ceiling = Math.min(policy.maxDelayMs, initial * 2 ** failures);
      const jittered = failures === 0 ? Math.random() * initial : ceiling / 2 + (Math.random() * ceiling) / 2;
      const delay = Math.min(jittered, giveUpAfterMs - waited);
      onReconnect?.({ streamId, from: position, attempt: failures, delayMs: delay, reason: lastProblem });
      await sleep(delay, stop.signal);
    }
    ended = true;
    if (!stop.signal.aborted) controller.close();
  }
}

/**
 * Read SSE events from `body` until `onEvent` returns true (→ true) or the body ends (→ false),
 * reading each next piece only once `room()` (a promise, or nothing when there is room) settles.
 */
async function readEvents(body, signal, room, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let finished = false;
  const parser = createSseParser((event) => {
    if (!finished && onEvent(event)) finished = true;
  });
  const release = () => reader.cancel().catch(() => {});
  signal.addEventListener('abort', release, { once: true });
  try {
    while (!finished) {
      await room();
      if (signal.aborted) break;
      const { done, value } = await reader.read();
      if (done) break;
      parser.push(value);
    }
  } finally {
    signal.removeEventListener('abort', release);
    if (finished) release();
  }
  return finished;
}

async function errorDetail(res) {
  try {
    const body = await res.json();
    return { code: body?.error, message: body?.message };
  } catch {
    return {};
  }
}

/** Parse the app's `{streamId, token}` answer. */
async function streamRef(res, url) {
  let body;
  try {
    body = await res.json();
  } catch {
    throw new ChatTransportError(`${url} answered ${res.status} without JSON`, { status: res.status, url });
  }
  if (typeof body?.streamId !== 'string' || body.streamId === '') {
    throw new ChatTransportError(`${url} answered without a streamId: ${JSON.stringify(body).slice(0, 200)}`, { status: res.status, url });
  }
  return { streamId: body.streamId, token: body.token };
}

async function failure(res, url, what) {
  const detail = await errorDetail(res);
  return new ChatTransportError(detail.message ?? `${what} failed with ${res.status}`, { status: res.status, code: detail.code, url });
}

const asHeaders = (h) => (h instanceof Headers ? Object.fromEntries(h.entries()) : { ...(h ?? {}) });
const resolveValue = async (v) => (typeof v === 'function' ? v() : v);

let warnedReplayUnread = false;

/** The AI SDK `ChatTransport` over rindle-streams (see the header comment). */
export class RindleChatTransport {
  #options;
  /** The SDK read `resumeStreamIsReplay` since the last `reconnectToStream` (see its getter). */
  #replayRead = false;

  /**
   * `reconnectToStream` replays the answer from its start: the SDK resets its message state. A
   * getter, so the transport learns whether the SDK that resumed reads it (ai >= 7.0.137).
   */
  get resumeStreamIsReplay() {
    this.#replayRead = true;
    return true;
  }

  #readers = new Set();
  #cancelled = new Set(); // stream ids already cancelled (the abort can be seen twice)
  #attach; // the answer the next reconnectToStream resumes by name (attach)

  constructor({
    api = '/api/chat',
    streamsUrl = '',
    prefix = '/streams',
    headers,
    body,
    credentials,
    fetch,
    prepareSendMessagesRequest,
    prepareReconnectToStreamRequest,
    cancelOnStop = true,
    retry,
    onReconnect,
  } = {}) {
    this.#options = {
      api, streamsUrl, prefix, headers, body, credentials, fetch, prepareSendMessagesRequest, prepareReconnectToStreamRequest, cancelOnStop, retry, onReconnect,
    };
  }

  get #fetch() {
    return this.#options.fetch ?? ((...args) => globalThis.fetch(...args));
  }

  async sendMessages({ chatId, messages, abortSignal, trigger, messageId, headers, body, metadata }) {
    const o = this.#options;
    const baseHeaders = { ...asHeaders(await resolveValue(o.headers)), ...asHeaders(headers) };
    const baseBody = { ...(await resolveValue(o.body)), ...body };
    const credentials = await resolveValue(o.credentials);
    const prepared = await o.prepareSendMessagesRequest?.({
      id: chatId, messages, body: baseBody, headers: baseHeaders, credentials, api: o.api, trigger, messageId, requestMetadata: metadata,
    });
    const api = prepared?.api ?? o.api;
    const requestBody = prepared?.body ?? { ...baseBody, id: chatId, messages, trigger, messageId };
    // Not tied to abortSignal: a stop() while the app is starting the answer must still learn
    // the stream id, to cancel it.
    const started = this.#fetch(api, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(prepared?.headers !== undefined ? asHeaders(prepared.headers) : baseHeaders) },
      body: JSON.stringify(requestBody),
      credentials: prepared?.credentials ?? credentials,
    }).then(async (res) => {
      if (!res.ok) throw await failure(res, api, 'starting the answer');
      return streamRef(res, api);
    });
    let ref;
    if (abortSignal) {
      const aborted = new Promise((_, reject) => {
        if (abortSignal.aborted) reject(abortError(abortSignal.reason));
        abortSignal.addEventListener('abort', () => reject(abortError(abortSignal.reason)), { once: true });
      });
      aborted.catch(() => {});
      started.then((r) => abortSignal.aborted && this.#cancel(r), () => {});
      ref = await Promise.race([started, aborted]);
    } else {
      ref = await started;
    }
    return this.#follow(ref, abortSignal, credentials, undefined, chatId);
  }

  /**
   * The next `reconnectToStream` resumes the answer `streamId` (a turn the chat's feed announced:
   * chat-feed.js's `syncChat`): the app's endpoint is asked for it by name,
   * `GET {api}/{chatId}/stream?answer={streamId}`, whatever it has become since.
   */
  attach(streamId) {
    this.#attach = streamId;
  }

  async reconnectToStream({ chatId, abortSignal, headers, body, metadata }) {
    const o = this.#options;
    const answer = this.#attach;
    this.#attach = undefined;
    const baseHeaders = { ...asHeaders(await resolveValue(o.headers)), ...asHeaders(headers) };
    const credentials = await resolveValue(o.credentials);
    const prepared = await o.prepareReconnectToStreamRequest?.({
      id: chatId, answer, body: { ...(await resolveValue(o.body)), ...body }, headers: baseHeaders, credentials, api: o.api, requestMetadata: metadata,
    });
    const api = prepared?.api ?? `${o.api}/${encodeURIComponent(chatId)}/stream${answer === undefined ? '' : `?answer=${encodeURIComponent(answer)}`}`;
    const res = await this.#fetch(api, {
      method: 'GET',
      headers: prepared?.headers !== undefined ? asHeaders(prepared.headers) : baseHeaders,
      credentials: prepared?.credentials ?? credentials,
      signal: abortSignal,
    });
    if (res.status === 204) return null;
    if (!res.ok) throw await failure(res, api, 'looking up the active answer');
    const ref = await streamRef(res, api);
    // An abort before this point is never a user's stop (the chat was not streaming yet; React
    // StrictMode's double mount does it): nothing to cancel. After it, it is `stop()`.
    if (abortSignal?.aborted) throw abortError(abortSignal.reason);
    this.#replayRead = false;
    return this.#follow(ref, abortSignal, credentials, () => {
      // The SDK reads `resumeStreamIsReplay` before it reads the stream, if it reads it at all.
      if (this.#replayRead || warnedReplayUnread) return;
      warnedReplayUnread = true;
      console.warn(
        'rindle-streams: the AI SDK that resumed this chat does not read the transport\'s resumeStreamIsReplay; its replay of the answer may show parts twice. Use ai >= 7.0.137.',
      );
    }, chatId);
  }

  /** Stop every reader this transport started (without cancelling the answers). */
  close() {
    for (const reader of this.#readers) reader.cancel().catch(() => {});
    this.#readers.clear();
  }

  /**
   * The answer's chunks for the SDK. `credentials`: the option, resolved for this request (it may
   * be a function); `onFirstRead`: called once, when the SDK first reads.
   */
  #follow(ref, abortSignal, credentials, onFirstRead, chatId) {
    if (abortSignal?.aborted) {
      this.#cancel(ref);
      throw abortError(abortSignal.reason);
    }
    const o = this.#options;
    const stream = readUIStream({
      ...ref, token: this.#freshToken(ref, chatId, credentials), streamsUrl: o.streamsUrl, prefix: o.prefix, fetch: o.fetch, credentials, retry: o.retry, onReconnect: o.onReconnect,
    });
    // Our own reader over it, so close() and the abort can stop it; the SDK reads the outer stream.
    const inner = stream.getReader();
    this.#readers.add(inner);
    let finished = false; // the answer's ending was delivered: an abort has nothing left to cancel
    const cancelAnswer = () => finished || this.#cancel(ref);
    const onAbort = () => {
      cancelAnswer();
      inner.cancel().catch(() => {});
    };
    const cleanup = () => {
      this.#readers.delete(inner);
      abortSignal?.removeEventListener('abort', onAbort);
    };
    abortSignal?.addEventListener('abort', onAbort, { once: true });
    return new ReadableStream({
      async pull(controller) {
        onFirstRead?.();
        onFirstRead = undefined;
        let next;
        try {
          next = await inner.read();
        } catch (err) {
          cleanup();
          return controller.error(err);
        }
        if (next.done) {
          finished = true;
          cleanup();
          return controller.close();
        }
        controller.enqueue(next.value);
      },
      cancel() {
        // The SDK cancels its reader on stop(), possibly before our abort listener ran.
        if (abortSignal?.aborted) cancelAnswer();
        cleanup();
        return inner.cancel();
      },
      // Nothing is pulled before the SDK reads (so `onFirstRead` is its first read).
    }, { highWaterMark: 0 });
  }

  /**
   * The token the answer's reads carry: the one the app gave, until it is within
   * `TOKEN_MARGIN_MS` of its `exp` or the stream API refused it; then a fresh one from the app's
   * endpoint (`GET {api}/{chatId}/stream?answer={streamId}`), which it held anyway (SPEC §11: no
   * connection outlives its token). The cancel keeps the token it had.
   */
  #freshToken(ref, chatId, credentials) {
    let current = ref.token;
    return async (reason) => {
      const exp = tokenExpiresAt(current);
      const stale = reason === 'refused' || (exp !== undefined && exp - Date.now() < TOKEN_MARGIN_MS);
      if (!stale || chatId === undefined) return current;
      const o = this.#options;
      const api = `${o.api}/${encodeURIComponent(chatId)}/stream?answer=${encodeURIComponent(ref.streamId)}`;
      const headers = asHeaders(await resolveValue(o.headers));
      const res = await this.#fetch(api, { method: 'GET', headers, credentials });
      if (!res.ok) throw await failure(res, api, 'refreshing the answer\'s token');
      current = (await streamRef(res, api)).token;
      return current;
    };
  }

  /** POST …/cancel (needs `cancel` scope); keepalive lets it outlive a closing page. */
  #cancel({ streamId, token }) {
    const o = this.#options;
    if (!o.cancelOnStop || this.#cancelled.has(streamId)) return;
    this.#cancelled.add(streamId);
    const url = `${String(o.streamsUrl).replace(/\/+$/, '')}${o.prefix}/${encodeURIComponent(streamId)}/cancel`;
    resolveValue(o.credentials)
      .then((credentials) =>
        this.#fetch(url, { method: 'POST', headers: token == null ? {} : { authorization: `Bearer ${token}` }, credentials, keepalive: true }),
      )
      .then((res) => res.body?.cancel(), () => {});
  }
}
