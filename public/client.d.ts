// Types for client.js: the rindle-streams reader client (SPEC §3). Offsets are UTF-16 code units,
// i.e. JavaScript string lengths.

export type EndStatus = 'complete' | 'cancelled' | 'error' | 'interrupted';

/** The statuses a message row ends with; `/text` with one of them is the final text. */
export declare const TERMINAL_STATUSES: readonly EndStatus[];

/** One frame of a subscription (SPEC §3). */
export type Frame =
  | { type: 'open'; streamId: string; from: number; seq: number; durableSeq: number; ended: boolean }
  | { type: 'chunk'; from: number; seq: number; text: string }
  | { type: 'durable'; seq: number }
  | { type: 'end'; seq: number; status: EndStatus; error?: string }
  | { type: 'stale'; floorSeq: number; durableSeq: number }
  | { type: 'absent' };

/** A reader's view of one stream. */
export interface ReaderState {
  /** The text held: while live, a prefix of the produced text; once ended, exactly the durable text. */
  text: string;
  /** The produced length seen (once ended: `text.length`). */
  seq: number;
  /** Everything below this is committed to D1. */
  durableSeq: number;
  ended: boolean;
  status: 'connecting' | 'streaming' | EndStatus;
  error: string | undefined;
}

/** A chunk row of the durable plane: `seq` is the offset its text ends at. */
export interface ChunkRow {
  seq: number;
  text: string;
}

/** Two prefixes of one text merge by taking the longer. */
export declare function spliceStreamText(a: string, b: string): string;

/** The SSE `id:` of a frame (`open` → from, `chunk` → seq): where a subscription resumes. */
export declare function frameResumePoint(frame: Frame): number | undefined;

/** The durable text: the body, then the contiguous chunk rows in seq order (as the Worker's /text). */
export declare function assembleDurableText(body: string | null | undefined, chunks?: readonly ChunkRow[]): string;

/** Milliseconds before rejoin number `attempt` (0-based): `baseMs · 2^attempt`, jittered over its upper half. */
export declare function backoffDelay(attempt: number, baseMs: number, random?: () => number): number;

/** A chunk started beyond the text held (or an `end` claimed more): frames were lost. */
export declare class StreamGapError extends Error {
  constructor(have: number, from: number);
  readonly name: 'StreamGapError';
  readonly have: number;
  readonly from: number;
}

export declare function initialState(text?: string): ReaderState;

/**
 * Folds one frame into a state, returning a new one. Throws {@link StreamGapError} on a gap.
 * `end` cuts the text to `end.seq`, the durable length.
 */
export declare function applyFrame(state: ReaderState, frame: Frame): ReaderState;

/** What `onEnd` receives: the stream's ending and the text it ends with (exactly the durable text). */
export interface StreamEnd {
  status: EndStatus;
  /** The durable length: where the text stops. */
  seq: number;
  error: string | undefined;
  text: string;
}

/** The EventSource constructor client.js uses (the browser's, or e.g. the `eventsource` package). */
export interface EventSourceLike {
  readonly readyState: number;
  addEventListener(type: 'message', listener: (event: { data: string; lastEventId?: string }) => void): void;
  addEventListener(type: 'error', listener: (event: unknown) => void): void;
  close(): void;
}
export interface EventSourceConstructor {
  new (url: string): EventSourceLike;
  readonly CLOSED?: number;
}

export interface FollowStreamOptions {
  streamId: string;
  /**
   * A read-scoped token, sent as `?token=` (EventSource cannot set headers), or a function giving
   * one, asked again before every connection (a connection ends at its token's `exp`: the
   * client then rejoins from the text it holds with a fresh token, missing nothing).
   */
  token?: string | null | (() => string | null | Promise<string | null>);
  /** Origin of the Worker (default: this page's). */
  baseUrl?: string;
  /** The Worker's PATH_PREFIX (default `/streams`). */
  prefix?: string;
  /** Text the reader already holds (a prefix of the produced text). */
  initialText?: string;
  /** Where to join (default `initialText.length`). */
  from?: number;
  /**
   * The whole text so far. While live it only grows; once, right before `onEnd`, it may be
   * shorter: a stream that ended holds exactly its durable text.
   */
  onText?: (text: string, seq: number) => void;
  /** Text below this offset is committed to D1. */
  onDurable?: (durableSeq: number) => void;
  onEnd?: (end: StreamEnd) => void;
  /** Gave up rejoining (`maxRetries` in a row without an `open`). */
  onError?: (error: Error) => void;
  EventSourceImpl?: EventSourceConstructor;
  fetchImpl?: typeof globalThis.fetch;
  /** Rejoins in a row without an `open` before giving up (default 6). */
  maxRetries?: number;
  /** Base of the jittered exponential backoff between rejoins (default 250 ms). */
  retryDelayMs?: number;
}

export interface StreamHandle {
  readonly text: string;
  readonly seq: number;
  readonly durableSeq: number;
  readonly status: ReaderState['status'];
  readonly state: ReaderState;
  /** Drop the connection and rejoin at `?from=<text length>`. */
  drop(): void;
  /** Stop following; `done` resolves with the state so far. */
  close(): void;
  /** The final state; rejects with the error given to `onError`. */
  readonly done: Promise<ReaderState>;
}

export declare function followStream(options: FollowStreamOptions): StreamHandle;
