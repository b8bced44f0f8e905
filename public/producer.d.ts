// Types for producer.js: rindle-streams producer helpers for a JavaScript Worker (or Node ≥ 20).
// `ai` is referenced for its types only; the module itself imports nothing.
import type { UIMessage, UIMessageChunk } from 'ai';

export { readUIMessage, uiChunksOf, type MessageRow, type ReadUIMessageOptions } from './ui-message.js';

/** Something with a `fetch`, such as a service binding (`env.RINDLE`). */
export interface Fetcher {
  fetch(request: Request): Promise<Response>;
}

/** Where the stream API is: a service binding, or a base URL. */
export type StreamApi =
  | { service: Fetcher; prefix?: string }
  | { baseUrl: string; prefix?: string; fetch?: typeof globalThis.fetch };

export type StreamFormat = 'text' | 'ui';

export type OpenStreamOptions<F extends StreamFormat = 'text'> = StreamApi & {
  /** The message row's id; the app inserted the row before opening (SPEC §5). */
  streamId: string;
  /** A token with `write` scope for `streamId`. */
  token: string;
  /** `ui`: the text is NDJSON of AI SDK UI message chunks (SPEC §9). Default `text`. */
  format?: F;
  /** Handed to the Worker's authorizer (and kept with the stream). */
  meta?: unknown;
  /**
   * The chat the answer belongs to (SPEC §11): its feed (`GET {prefix}/chats/{id}/events`)
   * announces `userMessage` (the user's `UIMessage` that started the turn: role `user`, at most
   * 64 KiB of JSON), then the answer's start and its end, to every tab and device of the chat.
   * Where the message table maps a chat column the row must be of this chat (else 409
   * `open_refused`); a `userMessage` that is not a user `UIMessage` is 400 `bad_user_message`, and
   * nothing is opened or announced.
   */
  chat?: { id: string; userMessage?: UIMessage };
  /**
   * Surviving a reset object (SPEC §10): on a lost connection, a reset object's error (503
   * `unavailable`, a runtime 5xx, "Durable Object reset because its code was updated", "…is no
   * longer active"), `not_open` or `resume_required`, every write (`append`, `flush`, `close`,
   * `fail`, `pipe`) POSTs `/resume`, re-sends what the server lost from the `seq` it answers and
   * carries on (`pipe` keeps reading the same source: it is read once). Retries with jittered
   * backoff (`baseDelayMs` doubling to `maxDelayMs`) for `timeoutMs` per gap, then fails as
   * without it. Defaults: `RESUME_DEFAULTS` (60 s, 100 ms, 2 s). `false`: never resume. A resume
   * carries the epoch the producer holds and a random id of this producer's: a producer another
   * resume replaced is refused `superseded` (it stops, and never fails the stream), and a resume
   * retried after its answer was lost gets the same grant.
   */
  resume?: Partial<ResumeOptions> | false;
  /** Called after each successful resume, before the lost text is re-sent (logs, metrics). */
  onResume?: (info: ResumeInfo) => void;
  /**
   * Hold the stream's watch (`GET /watch`) from the open until the producer is done, so a
   * reader's cancel fires `signal` within a second in any state: before the model's first
   * token, between appends, during a streaming append (whose own early answer a client's fetch
   * may not read before the body ends), a refused one, the gap after a reset. One more request
   * open on the stream's object while the answer runs (it is asked again every 20 s, and after
   * a failure within half a second). Default `true`; `false`: a cancel reaches the producer
   * only in a write's answer.
   */
  watch?: boolean;
};

export interface ResumeOptions {
  /** How long one gap may last before the write fails with its own error. Default 60 000. */
  timeoutMs: number;
  /** The first wait. Default 100. */
  baseDelayMs: number;
  /** The longest wait. Default 2 000. */
  maxDelayMs: number;
}

/** Why a write resumed: see `resumeCause`. */
export type ResumeCause = 'connection' | 'reset' | 'not_open' | 'resume_required';

export interface ResumeInfo {
  cause: ResumeCause;
  /** The write's failure that started the gap. */
  error: unknown;
  /** Which resume call answered (1 = the first). */
  attempt: number;
  /** Where the server's text stands: the helper re-sends from here. */
  seq: number;
  durableSeq: number;
  /** The producer epoch the following writes carry. */
  epoch: number;
  /** UTF-16 code units re-sent from what the helper kept. */
  resent: number;
}

export const RESUME_DEFAULTS: Readonly<ResumeOptions>;

/** The wait before resume attempt `attempt` (0-based): `min(maxDelayMs, baseDelayMs·2^attempt)`, jittered to half..all of it. */
export function backoffDelay(attempt: number, options?: Partial<ResumeOptions>, random?: () => number): number;

/** Whether a write's failure means "resume and re-send" (and why), or `null`. */
export function resumeCause(error: unknown): ResumeCause | null;

/**
 * What a producer sent that the server may still lose: from `start` (the last `durableSeq` it
 * was told) to `end`, in UTF-16 code units. For a streaming append, the whole body since the
 * append started (its answer is the first `durableSeq` it hears).
 */
export class KeptText {
  constructor(start?: number);
  readonly start: number;
  readonly end: number;
  readonly text: string;
  push(piece: string): void;
  /** Drop what lies below `durableSeq` (committed: it survives any reset). */
  forget(durableSeq: number): void;
  /** The text from `seq` on; `ResumeGapError` when `seq` is outside `start..end` or inside a surrogate pair. */
  from(seq: number): string;
}

/** A resume answered a `seq` the producer cannot continue from (a server bug): nothing is re-sent. */
export class ResumeGapError extends Error {
  name: 'ResumeGapError';
  seq: number;
  kept: { start: number; end: number };
}

/** A request that got no answer (the connection failed or dropped): a resume cause. */
export class ConnectionLostError extends Error {
  name: 'ConnectionLostError';
  /** `open`, `append`, `flush`, `close`, `fail`, `resume` or `watch`. */
  action: string;
}

/** `{ seq, durableSeq, cancelled }`: offsets in UTF-16 code units of the stream's text. */
export interface AppendResult {
  seq: number;
  durableSeq: number;
  cancelled: boolean;
}

/** The flush answer: everything below `durableSeq` is committed. */
export interface FlushResult {
  seq: number;
  durableSeq: number;
}

export interface EndResult {
  status: 'complete' | 'cancelled' | 'error' | 'interrupted';
  seq: number;
  durableSeq: number;
}

type Piece<F extends StreamFormat> = F extends 'ui' ? UIMessageChunk : string;

export interface ProducerStream<F extends StreamFormat = 'text'> {
  readonly streamId: string;
  readonly format: F;
  /** The open answer (`epoch` from a server that resumes). */
  readonly opened: { streamId: string; seq: number; durableSeq: number; epoch?: number };
  /** The producer epoch the writes carry as `x-rindle-epoch` (each resume makes a new one). */
  readonly epoch: number | undefined;
  /**
   * Fires (reason: a `CancelledError`, named `AbortError`) once the producer learns of a
   * cancel: pass it as the model call's `abortSignal`. With the watch (the default) within a
   * second of the cancel, whatever the producer is doing.
   */
  readonly signal: AbortSignal;
  readonly cancelled: boolean;
  /**
   * One plain append: a string (`text`), or a chunk or an array of chunks (`ui`). On a `ui`
   * stream a `start` chunk's `messageId` is the stream id: set when missing, refused
   * (`BadChunkError`) when it is another.
   */
  append(value: F extends 'ui' ? UIMessageChunk | UIMessageChunk[] : string): Promise<AppendResult>;
  /** Resolves once everything appended so far is committed to D1 (503 `checkpoint_failed` otherwise). */
  flush(): Promise<FlushResult>;
  /** Seal the stream. */
  close(): Promise<EndResult>;
  /** Seal the stream as `error` with this message (`cancelled` when a reader's cancel was seen first). */
  fail(error: unknown): Promise<EndResult>;
  /**
   * Send `source` as ONE streaming append (NDJSON lines for `ui`), then `close()`; an upstream
   * that throws or a UI `error` chunk ends it with `fail()` instead. A cancel (heard through the
   * watch, or the append's early answer) fires `signal`: `pipe` stops the append and reading
   * `source` (it is cancelled), and closes (status `cancelled`).
   * Rejects (after failing the stream) if the stream API refuses the append, unless a cancel was
   * seen first (its early answer can cut the append's connection): then it resolves `cancelled`.
   * A reset object or a lost connection does not end it: it resumes and re-sends (`resume`), so
   * `pipe(result.toUIMessageStream())` survives a deploy with no code of yours. A cancel during
   * the gap resolves `cancelled` and fires `signal`; 409 `superseded` (another producer resumed
   * the stream) rejects without failing the stream, which is not this producer's any more.
   */
  pipe(source: ReadableStream<Piece<F>>): Promise<EndResult>;
  /**
   * `pipe` for the copy of the SSE that the AI SDK's `toUIMessageStreamResponse({ consumeSseStream })`
   * hands over, so a route handler that answers the browser itself also writes through rindle:
   * `consumeSseStream: (sse) => ctx.waitUntil(stream.consumeSseStream(sse))`. `ui` streams only.
   */
  consumeSseStream(sse: { stream: ReadableStream<string> }): Promise<EndResult>;
}

/** Open a stream and return its producer handle. Rejects with a `RindleError` on a refusal. */
export function openStream<F extends StreamFormat = 'text'>(options: OpenStreamOptions<F>): Promise<ProducerStream<F>>;

/** The stream API answered with an error (SPEC §4 shape). */
export class RindleError extends Error {
  name: 'RindleError';
  status: number;
  /** e.g. `open_refused`, `bad_chunk`, `forbidden`. */
  code: string;
  /** The whole JSON answer (`offset`, `seq`, … where the API adds them). */
  body: Record<string, unknown>;
}

/** A value that cannot be one line of a `ui` stream. */
export class BadChunkError extends TypeError {
  name: 'BadChunkError';
  chunk: unknown;
}

/** The reason `signal` carries: a reader cancelled the stream. */
export class CancelledError extends Error {
  name: 'AbortError';
  streamId: string;
}

/** One NDJSON line (with its `\n`) for a UI message chunk; throws `BadChunkError`. */
export function encodeUIChunk(chunk: UIMessageChunk): string;

/**
 * An HS256 token for the stream API (SPEC §4), signed with WebCrypto. Give readers
 * `read cancel`, producers `write`.
 */
export function signStreamToken(options: {
  /** STREAM_JWT_SECRET: at least 16 characters. */
  secret: string;
  /** An exact stream id, or a prefix ending in `*`. Required unless `chat` is given. */
  stream?: string;
  /**
   * An exact chat id, or a prefix ending in `*`: reads of that chat's answers (the message
   * table's chat column mapped), e.g. the resume GET `{prefix}/chats/{chat}/stream`.
   */
  chat?: string;
  scope: string | Array<'read' | 'write' | 'cancel'>;
  /** Default 3600. Make it outlive the longest answer plus reconnects. */
  ttlSeconds?: number;
  /** Default `app`. */
  sub?: string;
  /** ms since the epoch. Default `Date.now()`. */
  now?: number;
}): Promise<string>;
