// rindle-streams chat feed for the AI SDK: one conversation, live on every tab and device
// (SPEC §11). No dependencies; vendor it with chat-transport.js. Types: chat-feed.d.ts.
//
//   import { Chat, useChat } from '@ai-sdk/react';
//   import { RindleChatTransport } from './chat-transport.js';
//   import { syncChat } from './chat-feed.js';
//
//   const transport = new RindleChatTransport({ api: '/api/chat' });
//   const chat = new Chat({ id: chatId, messages: history.messages, transport });   // once per chat
//   useEffect(() => syncChat(chat, { transport, token: history.chatToken, active: history.active?.streamId }), [chat]);
//   const { messages, status, sendMessage, stop } = useChat({ chat });
//
// `syncChat` subscribes to the chat's feed (`GET {prefix}/chats/{chatId}/events`, an
// `EventSource`: a dropped connection resumes from its `Last-Event-ID`) and keeps `chat` in step
// with every turn of the conversation, wherever it was started:
//
//   * a turn started elsewhere (another tab, another device): its user message is added (or, for
//     a regeneration or an edit, replaces what followed it), then the answer is attached through
//     the transport's resume path (`transport.attach(streamId)`, then `chat.resumeStream()`:
//     `GET {api}/{chatId}/stream?answer={streamId}`, then the answer's `/ui` from offset 0, a
//     replay the SDK starts over at its `start` chunk), live to its end;
//   * a turn this tab started, or already shows, is left alone: nothing is shown twice;
//   * turns are applied one at a time, in the feed's order, each once the chat is idle (never while
//     it is submitting or streaming);
//   * `active` (the answer the app's history left out because it was in flight) is attached
//     first, once; the feed's replay of it is then already shown;
//   * when the feed says `reload` (the tab was away past its history), `reload()` (if given)
//     replaces the messages with the app's, and the history is applied again;
//   * a connection ends at its token's `exp`: pass `token` as a function (it is asked again
//     before every connection) and the session reconnects at once from its position, missing
//     nothing; every reconnect is the session's (the `EventSource`'s own would send the token and
//     position it was opened with);
//   * a hidden page keeps its feed (the chat's object sleeps: a waiting tab costs nothing) but
//     attaches no answer until it is shown; then it applies what came, in order
//     (`whileHidden: false` applies turns as they come).
//
// Exactly one feed subscription and at most one resume per answer per mount, under React
// StrictMode too: a `syncChat` for a chat that is already synced shares its subscription, and
// the cleanup closes it only if nothing synced it again within the same task (StrictMode's
// simulated unmount and remount). Pass `useChat({ chat })` (no `resume: true`): the resume is
// this helper's.

const DEFAULT_RETRY = { initialDelayMs: 1000, maxDelayMs: 30_000 };
/** Tabs whose connections end together (their tokens minted together, a deploy) spread their reconnects over this. */
const RECONNECT_JITTER_MS = 500;

/** The sessions of the chats being synced (a chat synced twice shares one). */
const sessions = new WeakMap();

/**
 * Keep `chat` (an AI SDK `Chat`) in step with its feed. Returns the cleanup (for `useEffect`).
 */
export function syncChat(chat, options) {
  let session = sessions.get(chat);
  if (!session) {
    session = new FeedSession(chat, options);
    sessions.set(chat, session);
  }
  session.retain();
  let released = false;
  return () => {
    if (released) return;
    released = true;
    session.release(() => sessions.delete(chat));
  };
}

/** A turn of the feed: its answer's stream, and what the feed said of it. */
function newTurn(streamId) {
  return { streamId, user: undefined, start: undefined, end: undefined };
}

const isBusy = (status) => status === 'submitted' || status === 'streaming';

/**
 * What to do for `turn` given the chat's `messages` (pure: the decisions of `syncChat`, exported for
 * tests). Returns `{ messages }` when the chat's messages must change first (the user message
 * added, or put in place of what a regeneration or an edit replaced) and `attach: true` when the
 * answer must be attached. `attached`: this mount attached the answer already (`'done'`), or
 * tried and failed (`'failed'`).
 */
export function planTurn(messages, turn, attached) {
  if (!turn.start) return { attach: false }; // a user message whose start has not come yet
  const messageId = turn.start.messageId ?? turn.streamId;
  const at = (id) => messages.findIndex((m) => m.id === id);
  const shown = at(messageId);
  const user = turn.user;
  if (shown >= 0) {
    // Shown already (this tab's own answer, or attached earlier). A user message the feed learned
    // of late goes just before it; an answer still in flight that this tab lost (a stream that
    // gave up) is attached again (its replay replaces it).
    let next;
    if (user && at(user.id) < 0) next = [...messages.slice(0, shown), user, ...messages.slice(shown)];
    const attach = !turn.end && attached === 'failed';
    return next ? { messages: next, attach } : { attach };
  }
  if (attached === 'done') return { attach: false }; // attached, then removed by the app: leave it
  if (!user) return { attach: true };
  const asked = at(user.id);
  // The question is shown: the answer is new (a regeneration, or an edit of the question): what
  // followed the question goes, and the question is as the feed has it. Else it is added.
  const next = asked >= 0 ? [...messages.slice(0, asked), user] : [...messages, user];
  return { messages: next, attach: true };
}

/**
 * Of the turns a new reader's replay holds (in order), those to apply: from the last one the chat
 * already shows anything of (its user message or its answer) on. Turns before it are older than the
 * app's history (or were replaced since). None shown: all of them.
 */
export function turnsToApply(messages, turns) {
  const ids = new Set(messages.map((m) => m.id));
  let from = 0;
  turns.forEach((turn, i) => {
    if (ids.has(turn.start?.messageId ?? turn.streamId) || (turn.user && ids.has(turn.user.id))) from = i;
  });
  return turns.slice(from);
}

class FeedSession {
  constructor(chat, { transport, chatId = chat.id, token, streamsUrl = '', prefix = '/streams', active, reload, EventSource: EventSourceImpl, retry, onEvent, onAttach, whileHidden = 'wait' } = {}) {
    if (!transport || typeof transport.attach !== 'function') throw new TypeError('syncChat: `transport` must be a RindleChatTransport (it attaches the feed\'s answers)');
    this.chat = chat;
    this.transport = transport;
    this.url = `${String(streamsUrl).replace(/\/+$/, '')}${prefix}/chats/${encodeURIComponent(chatId)}/events`;
    this.token = token;
    this.active = active;
    this.reload = reload;
    this.EventSource = EventSourceImpl ?? globalThis.EventSource;
    this.retry = { ...DEFAULT_RETRY, ...retry };
    this.onEvent = onEvent;
    this.onAttach = onAttach;
    /** `'wait'`: a hidden page applies no turn until shown; `false`: it applies them as they come. */
    this.whileHidden = whileHidden === 'wait';
    this.refs = 0;
    this.started = false;
    this.closed = false;
    this.timer = undefined;
    this.es = undefined;
    this.lastEventId = '';
    this.failures = 0;
    /** The turns the feed told of, by stream id, and their order. */
    this.turns = new Map();
    /** Between a new reader's connect (or a `reload`) and its `ready`: the replay is collected. */
    this.replaying = true;
    this.reloading = false;
    this.replay = [];
    /** Stream ids whose turn must be looked at again, in order (each once). */
    this.queue = [];
    this.draining = false;
    /** Answers this mount attached: stream id → 'attaching' | 'done' | 'failed'. */
    this.attached = new Map();
  }

  retain() {
    this.refs += 1;
    clearTimeout(this.timer);
    this.timer = undefined;
    // Started in a task of its own: a StrictMode unmount and remount in this task changes nothing.
    if (!this.started) this.timer = setTimeout(() => this.start(), 0);
  }

  release(forget) {
    this.refs -= 1;
    if (this.refs > 0) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      if (this.refs > 0) return;
      forget();
      this.close();
    }, 0);
  }

  start() {
    this.timer = undefined;
    if (this.started || this.closed) return;
    this.started = true;
    if (this.active) this.enqueue(this.turnOf(this.active).streamId, { start: { streamId: this.active, messageId: this.active } });
    this.connect();
  }

  close() {
    this.closed = true;
    this.es?.close();
    this.es = undefined;
    this.queue = [];
  }

  async connect() {
    if (this.closed) return;
    let token;
    try {
      token = typeof this.token === 'function' ? await this.token() : this.token;
    } catch (err) {
      return this.reconnectLater(err);
    }
    if (this.closed) return;
    const query = new URLSearchParams();
    if (token != null) query.set('token', token);
    // A new EventSource sends no Last-Event-ID: the position goes in the query, as it is now (an
    // empty `ready` id cleared it: the reader starts over as a new one).
    if (this.lastEventId) query.set('after', this.lastEventId);
    const es = new this.EventSource(`${this.url}?${query}`);
    this.es = es;
    let opened = false;
    es.onmessage = (event) => {
      if (this.es !== es) return;
      if (event.lastEventId !== undefined) this.lastEventId = event.lastEventId;
      let data;
      try {
        data = JSON.parse(event.data);
      } catch {
        return;
      }
      opened = true;
      this.failures = 0;
      this.onEvent?.(data);
      this.receive(data);
    };
    es.onerror = () => {
      // Whatever ended it (a dropped network, the server closing it at its token's `exp`, a
      // refusal), the reconnect is this session's, not the EventSource's: it asks the token
      // again, and sends the position it has now. A connection that delivered something comes
      // back at once; one refused before anything came backs off.
      if (this.es !== es) return;
      es.close();
      this.es = undefined;
      if (opened) this.reconnectSoon();
      else this.reconnectLater(new Error('the feed refused the connection'));
    };
  }

  /** A connection that served its time (its token's `exp`) is opened again at once, jittered. */
  reconnectSoon() {
    if (this.closed) return;
    setTimeout(() => this.connect(), Math.random() * RECONNECT_JITTER_MS);
  }

  reconnectLater() {
    if (this.closed) return;
    const ceiling = Math.min(this.retry.maxDelayMs, this.retry.initialDelayMs * 2 ** this.failures);
    this.failures += 1;
    setTimeout(() => this.connect(), ceiling / 2 + (Math.random() * ceiling) / 2);
  }

  turnOf(streamId) {
    let turn = this.turns.get(streamId);
    if (!turn) {
      turn = newTurn(streamId);
      this.turns.set(streamId, turn);
    }
    return turn;
  }

  receive(event) {
    switch (event.type) {
      case 'reload':
        this.replaying = true;
        this.reloading = true;
        this.replay = [];
        return;
      case 'ready': {
        if (!this.replaying) return;
        this.replaying = false;
        const replay = this.replay.map((id) => this.turns.get(id));
        this.replay = [];
        const reloading = this.reloading;
        this.reloading = false;
        this.enqueue(null, { replay, reloading });
        return;
      }
      case 'user':
      case 'start':
      case 'end': {
        const turn = this.turnOf(event.streamId);
        if (event.type === 'user') turn.user = event.message;
        else if (event.type === 'start') turn.start = { streamId: event.streamId, messageId: event.messageId, format: event.format };
        else turn.end = { status: event.status, durableSeq: event.durableSeq };
        if (this.replaying) {
          if (!this.replay.includes(turn.streamId)) this.replay.push(turn.streamId);
        } else {
          this.enqueue(turn.streamId);
        }
        return;
      }
      default:
    }
  }

  /** Looks at a turn (or applies a replay) once the ones before it are done. */
  enqueue(streamId, extra) {
    if (extra?.start) Object.assign(this.turnOf(streamId), extra);
    const job = extra?.replay ? { replay: extra.replay, reloading: extra.reloading } : { streamId };
    if (job.streamId && this.queue.some((j) => j.streamId === job.streamId)) return;
    this.queue.push(job);
    if (!this.draining) this.drain();
  }

  async drain() {
    this.draining = true;
    try {
      while (this.queue.length > 0 && !this.closed) {
        const job = this.queue.shift();
        await this.idle();
        if (this.closed) return;
        if (job.replay) {
          if (job.reloading && this.reload) {
            const messages = await this.reload();
            // The chat may have moved on while the app answered: set them once it is idle again.
            await this.idle();
            if (this.closed) return;
            this.chat.messages = messages;
          }
          for (const turn of turnsToApply(this.chat.messages, job.replay)) await this.apply(turn);
        } else {
          await this.apply(this.turns.get(job.streamId));
        }
      }
    } finally {
      this.draining = false;
    }
  }

  async apply(turn) {
    await this.idle();
    if (this.closed || !turn) return;
    const { messages, attach } = planTurn(this.chat.messages, turn, this.attached.get(turn.streamId));
    if (messages) this.chat.messages = messages;
    if (!attach || this.attached.get(turn.streamId) === 'attaching') return;
    this.attached.set(turn.streamId, 'attaching');
    this.onAttach?.({ streamId: turn.streamId });
    this.transport.attach(turn.streamId);
    try {
      await this.chat.resumeStream();
      this.attached.set(turn.streamId, this.chat.status === 'error' ? 'failed' : 'done');
    } catch {
      this.attached.set(turn.streamId, 'failed');
    }
  }

  /**
   * Resolves once the chat is neither submitting nor streaming, and the page is shown. A hidden
   * page keeps its feed (a tab waiting on a sleeping feed costs nothing) but attaches no answer:
   * the turns wait, in order, and are applied when it is shown again.
   */
  async idle() {
    await this.shown();
    if (!isBusy(this.chat.status)) return;
    await new Promise((resolve) => {
      const register = this.chat['~registerStatusCallback'];
      let unsubscribe;
      let poll;
      const check = () => {
        if (isBusy(this.chat.status) && !this.closed) return;
        unsubscribe?.();
        clearInterval(poll);
        resolve();
      };
      if (typeof register === 'function') unsubscribe = register.call(this.chat, check);
      else poll = setInterval(check, 50);
    });
  }

  /** Resolves once the page is visible (at once where there is no `document`: Node, a worker). */
  shown() {
    const doc = globalThis.document;
    if (!this.whileHidden || !doc || doc.visibilityState !== 'hidden' || this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      const onChange = () => {
        if (doc.visibilityState === 'hidden' && !this.closed) return;
        doc.removeEventListener('visibilitychange', onChange);
        resolve();
      };
      doc.addEventListener('visibilitychange', onChange);
    });
  }
}
