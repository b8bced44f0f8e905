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
// Surviving the object (SPEC §10): a deploy, an eviction or a crash resets the stream's object.
// Every write carries the producer epoch (`x-rindle-epoch`, from open/resume). On a lost
// connection, a reset object's error, `not_open` or `resume_required`, the helpers POST
// `/resume`, re-send what the server lost from the `seq` it answers (they keep every character
// sent beyond the last `durableSeq` they were told; for a streaming append, the whole body since
// it started) and carry on reading the source, which is read once. They retry with bounded,
// jittered backoff for `resume.timeoutMs` (60 s), then fail as before. `superseded` (another
// producer resumed the stream) stops them; a cancel during the gap fires `signal`.
//
// Stop reaches the model in every state: from the open until the producer is done, the helpers
// hold one more request on the stream, its watch (`GET /watch`), which the object answers the
// moment a reader cancels (or the stream ends), whatever the producer is doing: waiting for its
// model's first token, between appends, inside a streaming append (whose own early answer a
// client's fetch may not read before the request body ends), in a refused one, in the gap
// after a reset. `signal` then fires, `pipe` stops its append and the source, and closes.
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
  const request = (streamId, action, init) => new Request(`${origin}${prefix}/${encodeURIComponent(streamId)}/${action}`, init);
  return { request, send };
}

async function answer(res, action) {
  let raw;
  try {
    raw = await res.text();
  } catch (err) {
    throw new ConnectionLostError(action, err);
  }
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
 * `promise`, or a rejection with `signal`'s reason once it aborts. An aborted request's answer
 * may never settle: Node's fetch (undici, Node 22) leaves the body of a response that came while
 * a streaming request body was still being sent unread for ever once the request is aborted.
 */
function settledOrAborted(promise, signal) {
  if (!signal) return promise;
  return new Promise((resolve, reject) => {
    const aborted = () => reject(signal.reason);
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', aborted));
    if (signal.aborted) aborted();
    else signal.addEventListener('abort', aborted, { once: true });
  });
}

/**
 * Open a stream whose message row the app has already inserted (SPEC §5) and return its
 * producer handle. `token` needs `write` scope for `streamId`. `chat: { id, userMessage? }`
 * names the chat the answer belongs to: its feed (`GET {prefix}/chats/{id}/events`, SPEC §11)
 * announces the user's message, then the answer's start and end, to every tab of the chat.
 */
export async function openStream({ streamId, token, format = 'text', meta, chat, resume = {}, onResume, watch = true, ...where }) {
  if (format !== 'text' && format !== 'ui') throw new TypeError(`openStream: format must be "text" or "ui", got ${JSON.stringify(format)}`);
  if (chat !== undefined && (typeof chat !== 'object' || chat === null || typeof chat.id !== 'string')) {
    throw new TypeError('openStream: chat must be { id: string, userMessage?: UIMessage }');
  }
  const retry = resume === false ? null : { ...RESUME_DEFAULTS, ...resume };
  const api = endpoint(where);
  const auth = { authorization: `Bearer ${token}` };
  /** One request; a failure to reach the API at all is a `ConnectionLostError`. */
  const call = async (method, action, body, headers = {}, signal) => {
    // Built outside the try: a bad URL or header is the caller's error, not a lost connection.
    const request = api.request(streamId, action, { method, headers: { ...auth, ...headers }, body, signal, ...(isStream(body) ? { duplex: 'half' } : {}) });
    let res;
    try {
      res = await api.send(request);
    } catch (err) {
      throw signal?.aborted ? err : new ConnectionLostError(action, err);
    }
    return settledOrAborted(answer(res, action), signal);
  };
  const post = (action, body, headers, signal) => call('POST', action, body, headers, signal);
  const jsonHeaders = { 'content-type': 'application/json' };
  const textHeaders = { 'content-type': 'text/plain; charset=utf-8' };

  // This producer's id, on its open and its resumes: the server keeps it as the holder of the
  // epoch it grants, so a resume it retries after losing the answer gets the same grant, and a
  // resume after a lost open (no epoch learned) is granted only to the producer the open named:
  // another invocation of the same answer is refused `superseded`, never handed the stream.
  const producerId = globalThis.crypto.randomUUID();
  const producerHeader = { 'x-rindle-producer': producerId };
  const opened = await openOrResume(
    () => post('open', JSON.stringify({ format, meta, chat: chat && { id: chat.id, userMessage: chat.userMessage } }), { ...jsonHeaders, ...producerHeader }),
    () => post('resume', undefined, producerHeader),
    retry,
  );
  const cancel = new AbortController();
  const learn = (reply) => {
    if (reply?.cancelled || reply?.status === 'cancelled') cancel.abort(new CancelledError(streamId));
    return reply;
  };
  const encode = format === 'ui' ? uiChunkEncoder(streamId) : encodeText;

  // The watch: `GET /watch` held on the stream from now until the producer is done (`done`),
  // answered at a reader's cancel or the stream's end, else after a hold (then asked again).
  // Its answer is the one channel that reaches a producer in every state: a streaming append's
  // early answer may not be read by the client's fetch before the body ends (Node's fetch under
  // `wrangler dev`), a refused streaming append is answered at its body's end, and between
  // writes nothing is in flight at all. A failed watch is asked again after a short jittered
  // wait (at most WATCH_RETRY_MAX_MS: it bounds how late a cancel made during a gap is heard).
  // It gives up as a resume does: after `timeoutMs` of failures in a row (the API is gone).
  const done = new AbortController();
  const watching = watch ? (async () => {
    const { baseDelayMs, timeoutMs } = retry ?? RESUME_DEFAULTS;
    const delays = { baseDelayMs: Math.min(baseDelayMs, WATCH_RETRY_MAX_MS), maxDelayMs: WATCH_RETRY_MAX_MS };
    for (let failures = 0, since; !done.signal.aborted && !cancel.signal.aborted; ) {
      const bounded = new AbortController(); // a held watch that outlives its hold is a dead connection
      const timer = unref(setTimeout(() => bounded.abort(), WATCH_TIMEOUT_MS));
      const stop = () => bounded.abort();
      done.signal.addEventListener('abort', stop, { once: true });
      let reply;
      try {
        reply = await call('GET', 'watch', undefined, {}, bounded.signal);
        failures = 0;
        since = undefined;
      } catch (err) {
        if (done.signal.aborted) return;
        // Down, reset, not rebuilt yet, or the hold outlived: ask again. A refusal (a server
        // without the watch answers 404 `not_found`, a token without `write`) ends the watch.
        if (!(bounded.signal.aborted || resumeCause(err) || (err instanceof RindleError && err.code === 'store_unavailable'))) return;
        since ??= Date.now();
        if (Date.now() - since >= timeoutMs) return;
        await sleep(backoffDelay(failures++, delays), done.signal, true);
        continue;
      } finally {
        clearTimeout(timer);
        done.signal.removeEventListener('abort', stop);
      }
      learn(reply);
      if (reply.status !== 'streaming') return; // ended: nothing more to hear
    }
  })() : undefined;
  watching?.catch(() => {}); // it only ever fires `signal`
  /** The producer is done (sealed, superseded, given up): the watch stops. */
  const finished = () => done.abort();

  // The send layer. `epoch`: this producer's, sent on every write (none from a server without
  // resume, which then needs no header). `serverSeq`: where the server's text ends, as last
  // told. `kept`: what was sent and may still be lost (beyond the last durableSeq told).
  let epoch = opened.epoch;
  let serverSeq = opened.seq ?? 0;
  const kept = new KeptText(serverSeq);
  const epochHeader = () => (epoch === undefined ? {} : { 'x-rindle-epoch': String(epoch) });
  const told = (reply) => {
    if (typeof reply?.seq === 'number') serverSeq = reply.seq;
    if (typeof reply?.durableSeq === 'number') kept.forget(reply.durableSeq);
    return reply;
  };
  const write = (action, body, headers = {}, signal) =>
    post(action, body, { ...headers, ...epochHeader() }, signal).then(told, (err) => {
      if (isSuperseded(err)) finished(); // another producer owns the stream now
      throw err;
    });

  /**
   * POST /resume until it answers, with jittered backoff, for at most `retry.timeoutMs` since
   * `since` (the first failure of this gap). Returns the new `seq`, or a `{ sealed }` answer
   * when the stream ended during the gap (a cancel: `signal` fires).
   */
  const resumeAfter = async (failure, since) => {
    const cause = resumeCause(failure);
    for (let attempt = 0; ; attempt++) {
      if (Date.now() - since >= retry.timeoutMs) throw failure;
      // A cancel heard meanwhile (the watch) cuts the wait short: the next resume says it.
      await sleep(backoffDelay(attempt, retry), cancel.signal);
      let resumed;
      try {
        // The epoch it holds goes with it: a producer another resume replaced is told
        // `superseded`, across resets too, and never takes the stream back.
        resumed = await post('resume', undefined, { ...epochHeader(), ...producerHeader });
      } catch (err) {
        // Another producer owns the stream now: stop, and never fail a stream that is not ours.
        if (isSuperseded(err)) throw err;
        if (err instanceof RindleError && err.code === 'closed') {
          learn(err.body);
          if (cancel.signal.aborted) return { sealed: { status: 'cancelled', seq: err.body.seq, durableSeq: err.body.durableSeq } };
          throw err; // sealed otherwise (the window expired: interrupted)
        }
        // Still down, or D1 unreachable (store_unavailable): try again. Anything else (nothing
        // to resume, a server without resume) leaves the write's own failure as the outcome.
        if (resumeCause(err) || (err instanceof RindleError && err.code === 'store_unavailable')) continue;
        throw failure;
      }
      epoch = resumed.epoch;
      serverSeq = resumed.seq;
      const resent = kept.from(resumed.seq).length; // throws ResumeGapError before anything is sent
      if (typeof resumed.durableSeq === 'number') kept.forget(Math.min(resumed.durableSeq, resumed.seq));
      onResume?.({ cause, error: failure, attempt: attempt + 1, seq: resumed.seq, durableSeq: resumed.durableSeq, epoch: resumed.epoch, resent });
      return { seq: resumed.seq };
    }
  };

  /**
   * Run `attempt` (one write); on a resumable failure, resume and run it again, told it runs
   * after a resume (`resumed`: the kept tail from `serverSeq` goes first). `sealed` answers a
   * gap that ended in a cancel.
   */
  const resilient = async (attempt, sealed) => {
    let since; // when this gap started
    let after; // where things stood right after the last resume
    const progress = () => `${serverSeq}:${kept.end}`;
    for (let resumed = false; ; resumed = true) {
      try {
        return await attempt(resumed);
      } catch (err) {
        // Sealed `cancelled` (a Stop the row kept across a reset, a cancel in the gap): the cancel
        // is the outcome, as an answer saying `cancelled` would be, and `signal` fires.
        if (isCancelledClose(err)) return sealed(learn({ status: 'cancelled', seq: err.body.seq, durableSeq: err.body.durableSeq }));
        if (!retry || !resumeCause(err)) throw err;
        // A failure after progress (the server took text, or the source gave more) starts a new
        // gap; one with none continues the last, so resumes that lead nowhere end in time.
        if (after !== progress()) since = Date.now();
        const resumedTo = await resumeAfter(err, since);
        if (resumedTo.sealed) return sealed(resumedTo.sealed);
        after = progress();
      }
    }
  };

  // Writes are sent one at a time, in call order: each resends the tail from where the server stands.
  let queue = Promise.resolve();
  const serial = (fn) => {
    const run = queue.then(fn);
    queue = run.catch(() => {});
    return run;
  };
  /** A gap that ended in a cancel, as an append's answer (`ended`: the seal, nothing left to close). */
  const asAppend = (sealed) => ({ seq: sealed.seq, durableSeq: sealed.durableSeq, cancelled: true, ended: sealed });
  /** Everything kept from `serverSeq` as one plain append (a resent tail plus `text`). */
  const appendKept = () => resilient(() => write('append', kept.from(serverSeq), textHeaders).then(learn), asAppend);
  const ended = (action, body, headers) =>
    serial(async () => {
      // The tail a resume found missing goes first; then the seal itself.
      return resilient(async (resumed) => {
        if (resumed && kept.end > serverSeq) await write('append', kept.from(serverSeq), textHeaders).then(learn);
        return learn(await write(action, body, headers));
      }, (sealed) => sealed);
    }).finally(() => action !== 'flush' && finished());

  const stream = {
    streamId,
    format,
    /** The open answer: `{ streamId, seq, durableSeq, epoch }`. */
    opened,
    /** Fires when a reader cancelled the stream (learned from an append or close answer). */
    signal: cancel.signal,
    get cancelled() {
      return cancel.signal.aborted;
    },
    /** The producer epoch its writes carry (a resume makes a new one). */
    get epoch() {
      return epoch;
    },
    /** One plain append: a string (text) or one chunk / an array of chunks (ui). */
    append(value) {
      const text = Array.isArray(value) && format === 'ui' ? value.map(encode).join('') : encode(value);
      return serial(() => {
        kept.push(text);
        return appendKept();
      });
    },
    /** Resolves once everything appended so far is committed to D1: `{ seq, durableSeq }`. */
    flush: () => ended('flush'),
    /** Seal the stream: `{ status, seq, durableSeq }` (`cancelled` when a cancel was seen). */
    close: () => ended('close'),
    /** Seal the stream as `error` with this message (`cancelled` when a cancel was seen). */
    fail: (error) => ended('fail', JSON.stringify({ error: errorText(error) }), jsonHeaders),

    /**
     * Send `source` (UI message chunks for `ui`, strings for `text`) as one streaming append,
     * then close, or fail on an upstream error. Resolves with the close/fail answer. After a
     * reset the append starts again from the `seq` the resume answers, with the same source.
     */
    async pipe(source) {
      const reader = source.getReader();
      let upstreamError; // what ends the stream with `fail` instead of `close`
      let badChunk; // a chunk refused here: the append was cut short on purpose
      let sourceDone = false;
      let reading; // the one read in flight, shared by the bodies of successive attempts
      /** Read one piece of the source into `kept` (or note its end). */
      const readOne = () =>
        (reading ??= (async () => {
          let next;
          try {
            next = await reader.read();
          } catch (err) {
            upstreamError = err;
            sourceDone = true;
            return;
          }
          if (next.done) {
            sourceDone = true;
            return;
          }
          let line;
          try {
            line = encode(next.value);
          } catch (err) {
            badChunk = err;
            sourceDone = true;
            reader.cancel(err).catch(() => {});
            return;
          }
          // An `error` chunk is the AI SDK's way of saying the generation failed.
          if (format === 'ui' && next.value.type === 'error') upstreamError ??= next.value.errorText ?? 'the model stream reported an error';
          kept.push(line);
        })().finally(() => {
          reading = undefined;
        }));
      /** The body of one attempt: `kept` from `from` on, then the source as it is read, until `over` fires. */
      const bodyFrom = (from, over) => {
        let sent = from;
        return new ReadableStream({
          async pull(controller) {
            while (sent >= kept.end && !sourceDone && !over.aborted) await readOne();
            // An attempt that failed or was replaced sends no more: its connection may still take
            // bytes (a runtime that answered early keeps reading), which reach no one, and its
            // pulls would read the source ahead of the next attempt, which then sends all of that
            // in one piece. It ends cleanly, not with an error: a Worker's runtime may still be
            // copying the body to an answered request, and would log the error as uncaught.
            if (over.aborted) return controller.close();
            if (sent < kept.end) {
              const piece = kept.from(sent);
              sent = kept.end;
              controller.enqueue(encoder.encode(piece));
            } else controller.close();
          },
          // An attempt's body is dropped when its connection is (the source stays, for the next).
        });
      };

      let attempt; // aborts the connection of an attempt a resume replaced, or a cancel stopped
      // A cancel heard elsewhere (the watch, an answer) stops the append in flight, whatever
      // state it is in, and the source: the model stops now, not at the append's answer. (The
      // append is aborted with the default reason: a Worker's runtime logs any other as uncaught.)
      const stopped = () => {
        attempt?.abort();
        reader.cancel(cancel.signal.reason).catch(() => {});
      };
      cancel.signal.addEventListener('abort', stopped, { once: true });
      const streamAppend = async (resumed) => {
        attempt?.abort();
        // After a resume, what the server lost goes first as a plain append: its answer comes
        // whatever the body does next, and says whether a cancel came in the gap. It goes even
        // when empty: the object answers a refused streaming append (closed after a cancel) only
        // at its body's end, which waits on a model that stops only when `signal` fires.
        if (resumed) {
          const resent = learn(await write('append', kept.from(serverSeq), textHeaders));
          if (resent.cancelled) return resent;
        }
        if (cancel.signal.aborted) return { seq: serverSeq, durableSeq: kept.start, cancelled: true };
        const current = (attempt = new AbortController());
        return write('append', bodyFrom(serverSeq, current.signal), textHeaders, current.signal)
          .then(learn, (err) => {
            // Stopped by a cancel heard elsewhere: the cancel is the outcome (close seals it).
            if (cancel.signal.aborted && current.signal.aborted) return { seq: serverSeq, durableSeq: kept.start, cancelled: true };
            throw err;
          })
          .finally(() => current.abort()); // answered (at its body's end) or failed: its body is over
      };
      let appended;
      try {
        appended = await serial(() => resilient(streamAppend, asAppend));
      } catch (err) {
        attempt?.abort();
        finished();
        // Never leave the row `streaming`. A reader's cancel answers the append at once, and the
        // connection can be torn down before fetch reads that answer: `fail` then seals
        // `cancelled` and says so, and the cancel is the outcome, not this error. A superseded
        // producer does not own the stream any more: it only stops.
        // (One try: when it comes here after a resume gave up, the API has been gone for a while.)
        const failed = isSuperseded(err) ? undefined : await serial(() => write('fail', JSON.stringify({ error: errorText(err) }), jsonHeaders).then(learn)).catch(() => undefined);
        reader.cancel(stream.cancelled ? cancel.signal.reason : err).catch(() => {});
        if (stream.cancelled) return failed ?? { status: 'cancelled', seq: serverSeq, durableSeq: kept.start };
        throw err;
      }
      cancel.signal.removeEventListener('abort', stopped);
      if (appended.cancelled) reader.cancel(cancel.signal.reason).catch(() => {});
      if (appended.ended) {
        finished();
        return appended.ended; // sealed `cancelled` while the object was gone
      }
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

// ---------------------------------------------------------------------------------------
// Resume (SPEC §10)

/**
 * Open, surviving a reset during the open itself: a lost open may or may not have taken, so
 * after one the helper asks `resume` first (it took: carry on from the answered seq, with the
 * new epoch) and opens again only on `not_open` (it did not). A refused reopen after a lost
 * open is the lost open having taken: resume again.
 */
async function openOrResume(open, resume, retry) {
  let since;
  let resuming = false; // the next try is a resume (a lost open may have taken), else an open
  for (let attempt = 0; ; attempt++) {
    try {
      return await (resuming ? resume().then((r) => ({ seq: r.seq, durableSeq: r.durableSeq, epoch: r.epoch, format: r.format, resumed: true })) : open());
    } catch (err) {
      const code = err instanceof RindleError ? err.code : undefined;
      const tookAfterAll = since !== undefined && code === 'open_refused';
      if (!retry || !(resumeCause(err) || tookAfterAll || (resuming && code === 'store_unavailable'))) throw err;
      since ??= Date.now();
      if (Date.now() - since >= retry.timeoutMs) throw err;
      resuming = code !== 'not_open';
      await sleep(backoffDelay(attempt, retry));
    }
  }
}

/** A write refused because the stream was sealed `cancelled` (409 `closed`, status `cancelled`). */
const isCancelledClose = (err) => err instanceof RindleError && err.code === 'closed' && err.body?.status === 'cancelled';

/** The helpers' resume policy: retry for `timeoutMs`, waiting `baseDelayMs` doubling to `maxDelayMs`, jittered. */
export const RESUME_DEFAULTS = Object.freeze({ timeoutMs: 60_000, baseDelayMs: 100, maxDelayMs: 2_000 });

/**
 * The wait before resume attempt `attempt` (0-based): `baseDelayMs · 2^attempt`, capped at
 * `maxDelayMs`, then jittered to between half and all of it (so producers reset together do
 * not come back in step). The first attempt waits too: a reset object needs a moment.
 */
export function backoffDelay(attempt, { baseDelayMs = RESUME_DEFAULTS.baseDelayMs, maxDelayMs = RESUME_DEFAULTS.maxDelayMs } = {}, random = Math.random) {
  const ceiling = Math.min(maxDelayMs, baseDelayMs * 2 ** Math.min(attempt, 30));
  return ceiling / 2 + (random() * ceiling) / 2;
}

/** What a reset object's error says, as the runtime words it (the Worker's 503 `unavailable` quotes it). */
const RESET_MESSAGE = /Durable Object reset|is no longer active|code was updated|Network connection lost|internal error|exceeded its (?:memory|CPU)|object.*(?:overloaded|evicted)/i;

/**
 * Why a write's failure calls for "resume and re-send", or `null` when it does not:
 * `connection` (the request never got an answer), `reset` (the runtime or the Worker says the
 * object is gone: 503 `unavailable`, a 5xx that is not the stream API's own JSON, a reset
 * message), `not_open` (the new instance has no live stream yet), `resume_required` (it
 * rehydrated and waits for this producer).
 */
export function resumeCause(err) {
  if (err instanceof ConnectionLostError) return 'connection';
  if (!(err instanceof RindleError)) return null;
  if (err.code === 'not_open' || err.code === 'resume_required') return err.code;
  if (err.code === 'unavailable' || (err.status >= 500 && err.code === 'http_error') || (err.status >= 500 && RESET_MESSAGE.test(err.message))) return 'reset';
  return null;
}

const isSuperseded = (err) => err instanceof RindleError && err.code === 'superseded';

/**
 * The text a producer sent that the server may still lose: from `start` (the last durableSeq it
 * was told) to `end` (all it sent), in UTF-16 code units, the stream's coordinate.
 */
export class KeptText {
  constructor(start = 0) {
    this.start = start;
    this.text = '';
  }
  get end() {
    return this.start + this.text.length;
  }
  push(piece) {
    this.text += piece;
  }
  /** Drop what lies below `durableSeq`: it is committed and survives any reset. */
  forget(durableSeq) {
    const cut = Math.min(durableSeq, this.end) - this.start;
    if (cut <= 0) return;
    this.text = this.text.slice(cut);
    this.start += cut;
  }
  /**
   * The text from `seq` on, to re-send after a resume. A `seq` outside what is kept, or one in
   * the middle of a surrogate pair, is the server's error (ResumeGapError): never guess.
   */
  from(seq) {
    if (!Number.isInteger(seq) || seq < this.start || seq > this.end) {
      throw new ResumeGapError(`the server resumes at ${seq}, outside the ${this.start}..${this.end} this producer kept`, seq, this);
    }
    const i = seq - this.start;
    if (i > 0 && i < this.text.length && isHighSurrogate(this.text.charCodeAt(i - 1)) && isLowSurrogate(this.text.charCodeAt(i))) {
      throw new ResumeGapError(`the server resumes at ${seq}, inside a surrogate pair`, seq, this);
    }
    return this.text.slice(i);
  }
}

const isHighSurrogate = (c) => c >= 0xd800 && c <= 0xdbff;
const isLowSurrogate = (c) => c >= 0xdc00 && c <= 0xdfff;
/** Waits `ms`, or less when `signal` aborts (it resolves either way); `weak`: unref'd (the watch's). */
const sleep = (ms, signal, weak = false) =>
  new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    if (weak) unref(timer);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });

/** A timer that does not keep a Node process alive by itself (the watch is no reason to stay). */
const unref = (timer) => {
  timer?.unref?.();
  return timer;
};

/** The longest wait before a failed watch is asked again: a cancel made during a gap is heard within about this. */
const WATCH_RETRY_MAX_MS = 500;
/** A held watch answers within 20 s (the server's hold); one silent for this long is a dead connection. */
const WATCH_TIMEOUT_MS = 45_000;

/** A resume answered a `seq` the producer cannot continue from: a server bug, never patched over. */
export class ResumeGapError extends Error {
  constructor(message, seq, kept) {
    super(message);
    this.name = 'ResumeGapError';
    this.seq = seq;
    this.kept = { start: kept.start, end: kept.end };
  }
}

/** A request that got no answer (the connection failed or dropped): resume and re-send. */
export class ConnectionLostError extends Error {
  constructor(action, cause) {
    super(`${action}: the connection to the stream API was lost (${cause?.cause?.code ?? cause?.cause?.message ?? cause?.message ?? cause})`, { cause });
    this.name = 'ConnectionLostError';
    this.action = action;
  }
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
