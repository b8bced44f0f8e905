// rindle-streams reader client: follow a streamed model response over SSE, with no dependencies.
// Vendor this file, or load it from the Worker at `/client.js`.
//
//   import { followStream } from './client.js';
//   const handle = followStream({
//     streamId, token,                              // a read-scoped token, or a function giving one
//     onText: (text, seq) => render(text),          // the whole text so far (see "Endings")
//     onDurable: (durableSeq) => mark(durableSeq),  // text below this is committed to D1
//     onEnd: ({ status, seq, error, text }) => done(status),
//     onError: (err) => show(err),                  // gave up reconnecting
//   });
//   handle.drop();   // simulate a lost connection: rejoin at ?from=<text length>
//   handle.close();  // stop following
//   const final = await handle.done;  // { text, seq, durableSeq, ended, status, error }
//
// Tokens. A connection ends at its token's `exp` (the server closes it). Pass a function as
// `token` (sync or async, e.g. one that asks your app for a fresh token) and it is asked again
// before every connection: each rejoin, each `/text` read, and every reconnect, which this client
// then makes itself (from the text it holds) instead of leaving it to the EventSource, which
// would send the expired token again.
//
// Offsets (`seq`, `from`, `durableSeq`) are UTF-16 code units, i.e. JavaScript string lengths.
// In Node 20 pass `EventSourceImpl` (e.g. the `eventsource` package) and, if needed, `fetchImpl`.
// Types: client.d.ts.
//
// Endings. While the stream is live the text only grows. Once it has ended, the message row is
// the truth: a reader that ends holds exactly the durable text, `end.seq` (or the terminal
// row's `/text`) long. That can be shorter than what was shown live, when the stream ended
// `interrupted` or its seal fell short, so `onText` may deliver one shorter text, right before
// `onEnd`. Rejoins after a failure back off exponentially with jitter, so readers cut off
// together (a restart, a deploy) do not come back in lockstep.

export const TERMINAL_STATUSES = ['complete', 'cancelled', 'error', 'interrupted'];

/** Two prefixes of one text merge by taking the longer (contract P makes this enough). */
export function spliceStreamText(a, b) {
  return b.length > a.length ? b : a;
}

/** The SSE `id:` of a frame: where a subscription that saw it resumes. */
export function frameResumePoint(frame) {
  if (frame?.type === 'open') return frame.from;
  if (frame?.type === 'chunk') return frame.seq;
  return undefined;
}

/**
 * The durable text (SPEC §5): the message row's body, then its chunk rows `{ seq, text }` in seq
 * order, where a row's `seq` is the offset its text ends at. Only the contiguous prefix counts:
 * a row that starts past the assembled end (a gap) stops assembly, and a row that overlaps adds
 * only its new tail. The same rule as the Worker's `assemble_durable_text` (src/engine/text/reading.rs).
 */
export function assembleDurableText(body, chunks = []) {
  let text = body ?? '';
  for (const chunk of [...chunks].sort((x, y) => x.seq - y.seq)) {
    const from = Math.max(0, chunk.seq - chunk.text.length);
    if (from > text.length) break;
    if (chunk.seq > text.length) text += chunk.text.slice(text.length - from);
  }
  return text;
}

/**
 * How long to wait before rejoin number `attempt` (0-based): exponential from `baseMs`, with
 * jitter over its upper half, so many readers cut off at once spread their rejoins out.
 */
export function backoffDelay(attempt, baseMs, random = Math.random) {
  const ceiling = baseMs * 2 ** attempt;
  return ceiling / 2 + random() * (ceiling / 2);
}

/** A chunk starts beyond the text the reader holds: the frames between were lost. */
export class StreamGapError extends Error {
  constructor(have, from) {
    super(`stream gap: have ${have} code units, chunk starts at ${from}`);
    this.name = 'StreamGapError';
    this.have = have;
    this.from = from;
  }
}

export const initialState = (text = '') =>
  ({ text, seq: text.length, durableSeq: 0, ended: false, status: 'connecting', error: undefined });

/**
 * Fold one frame into a reader state, returning a new state (the input is not modified).
 * While live the text never shrinks; a chunk that starts past its end throws
 * {@link StreamGapError}. `end` cuts the text to `end.seq`, the durable length: an ended
 * stream is what D1 holds, never more (an `end` beyond the text held is a gap too).
 * `stale` and `absent` carry no text: the caller must rejoin from the durable text.
 */
export function applyFrame(state, frame) {
  const s = { ...state };
  switch (frame.type) {
    case 'open':
      s.seq = Math.max(s.seq, frame.seq);
      s.durableSeq = Math.max(s.durableSeq, frame.durableSeq);
      if (!s.ended) s.status = 'streaming';
      break;
    case 'chunk':
      if (frame.from > s.text.length) throw new StreamGapError(s.text.length, frame.from);
      if (frame.from + frame.text.length > s.text.length) s.text = s.text.slice(0, frame.from) + frame.text;
      s.seq = Math.max(s.seq, frame.seq, s.text.length);
      break;
    case 'durable':
      s.durableSeq = Math.max(s.durableSeq, frame.seq);
      break;
    case 'end':
      if (frame.seq > s.text.length) throw new StreamGapError(s.text.length, frame.seq);
      s.text = s.text.slice(0, frame.seq);
      s.seq = frame.seq;
      s.durableSeq = frame.seq;
      s.ended = true;
      s.status = frame.status;
      s.error = frame.error;
      break;
    case 'stale':
      s.durableSeq = Math.max(s.durableSeq, frame.durableSeq ?? 0);
      break;
  }
  return s;
}

/**
 * Follow one stream. See the header comment for usage. Native EventSource reconnects by itself
 * (with Last-Event-ID) on network errors; this only steps in when it reaches CLOSED without an
 * `end`, on `stale`/`absent`/a gap (read `/text`, then rejoin), and on `drop()`.
 */
export function followStream({
  streamId, token, baseUrl = '', prefix = '/streams', initialText = '', from = initialText.length,
  onText, onDurable, onEnd, onError,
  EventSourceImpl = globalThis.EventSource, fetchImpl = globalThis.fetch,
  maxRetries = 6, retryDelayMs = 250,
}) {
  const base = `${baseUrl}${prefix}/${encodeURIComponent(streamId)}`;
  // `token=…` for the next connection: a string as it is (at once), a function asked again each time.
  const authOf = (t) => (t == null ? '' : `token=${encodeURIComponent(t)}`);
  const refreshing = typeof token === 'function';
  const fixedAuth = refreshing ? undefined : authOf(token);
  const auth = async () => authOf(await token());
  let state = initialState(initialText);
  let es = null;
  let gen = 0; // bumped by every (re)join, so a superseded EventSource or fetch is ignored
  let retries = 0;
  let opened = false; // the current connection got its `open`
  let timer = null;
  let settle;
  const done = new Promise((resolve, reject) => { settle = { resolve, reject }; });
  done.catch(() => {}); // onError is the primary channel; an unobserved `done` must not crash Node

  const detach = () => {
    gen += 1;
    clearTimeout(timer);
    if (es) es.close();
    es = null;
  };

  const update = (next) => {
    const prev = state;
    state = next;
    if (next.text !== prev.text) onText?.(next.text, next.seq);
    if (next.durableSeq !== prev.durableSeq) onDurable?.(next.durableSeq);
  };

  const finish = () => {
    detach();
    onEnd?.({ status: state.status, seq: state.durableSeq, error: state.error, text: state.text });
    settle.resolve(state);
  };

  const fail = (err) => {
    detach();
    state = { ...state, error: err.message };
    onError?.(err);
    settle.reject(err);
  };

  // Rejoin after a backoff, at most `maxRetries` times in a row without a successful `open`.
  const retry = (why) => {
    detach();
    if (retries >= maxRetries) return fail(new Error(`stream ${streamId}: gave up after ${retries} retries (${why})`));
    const mine = gen;
    timer = setTimeout(() => mine === gen && connect(state.text.length), backoffDelay(retries, retryDelayMs));
    retries += 1;
  };

  const connect = async (at) => {
    detach();
    const mine = gen;
    let query;
    try {
      query = [fixedAuth ?? (await auth()), `from=${at}`].filter(Boolean).join('&');
    } catch (err) {
      if (mine === gen) retry(`the token could not be had: ${err?.message ?? err}`);
      return;
    }
    if (mine !== gen) return; // closed, dropped or superseded while the token came
    opened = false;
    const source = new EventSourceImpl(`${base}/events?${query}`);
    es = source;
    source.addEventListener('message', (ev) => {
      if (mine !== gen) return;
      let frame;
      let next;
      try {
        frame = JSON.parse(ev.data);
        next = applyFrame(state, frame);
      } catch (err) {
        return recover(err.message); // a gap, or a frame that is not JSON: rejoin from D1
      }
      update(next); // outside the try: an exception in the app's callback is not a stream fault
      if (frame.type === 'open') {
        retries = 0;
        opened = true;
      }
      if (frame.type === 'end') finish();
      else if (frame.type === 'stale' || frame.type === 'absent') recover(frame.type);
    });
    source.addEventListener('error', () => {
      if (mine !== gen) return;
      // CLOSED: it gave up. CONNECTING: the browser is reconnecting by itself with its
      // Last-Event-ID, and the same token; with a token function the rejoin is ours instead, with
      // a fresh token (the connection may have ended at its token's `exp`).
      if (source.readyState === (EventSourceImpl.CLOSED ?? 2)) retry('connection closed');
      else if (refreshing) rejoin();
    });
  };

  // A connection that ended (its token's `exp`, a dropped network) rejoins at once from the
  // text held, with a fresh token; one that had not opened counts as a failed attempt.
  const rejoin = () => {
    if (!opened) return retry('connection lost before it opened');
    detach();
    connect(state.text.length);
  };

  // Read the durable text. A terminal row is the whole truth: end holding exactly its text. A
  // row still streaming is a prefix of the produced text: splice it in and rejoin live.
  const recover = async (why) => {
    detach();
    const mine = gen;
    let body;
    try {
      const query = fixedAuth ?? (await auth());
      const res = await fetchImpl(`${base}/text${query ? `?${query}` : ''}`);
      body = await res.json();
      if (!res.ok) throw new Error(`${body.error ?? res.status}: ${body.message ?? 'text read failed'}`);
    } catch (err) {
      if (mine === gen) retry(`${why}; ${err.message}`);
      return;
    }
    if (mine !== gen) return; // closed, dropped or superseded meanwhile
    const durable = body.text ?? '';
    if (TERMINAL_STATUSES.includes(body.status)) {
      update({ ...state, text: durable, seq: durable.length, durableSeq: durable.length });
      state = { ...state, ended: true, status: body.status, error: body.error };
      return finish();
    }
    const text = spliceStreamText(state.text, durable);
    update({ ...state, text, seq: Math.max(state.seq, text.length), durableSeq: Math.max(state.durableSeq, durable.length) });
    retry(why);
  };

  connect(from);
  return {
    get text() { return state.text; },
    get seq() { return state.seq; },
    get durableSeq() { return state.durableSeq; },
    get status() { return state.status; },
    get state() { return state; },
    drop() {
      if (!state.ended && es) connect(state.text.length);
    },
    close() {
      detach();
      settle.resolve(state);
    },
    done,
  };
}
