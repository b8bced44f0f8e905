// Types for chat-transport.js: the AI SDK `ChatTransport` over rindle-streams.
// `ai` is referenced for its types only; the module itself imports nothing.
import type { ChatRequestOptions, ChatTransport, UIMessage, UIMessageChunk } from 'ai';

export { readUIMessage, uiChunksOf, type MessageRow, type ReadUIMessageOptions } from './ui-message.js';

/** How the transport reconnects a dropped `/ui` connection. */
export interface RetryOptions {
  /**
   * Upper bound of the first reconnect delay after a connection that delivered something (the
   * delay is uniform in [0, initial)); doubles per failed attempt. Default: the server's SSE
   * `retry:` (SSE_RETRY_MS), else 250.
   */
  initialDelayMs?: number;
  /** Largest delay between attempts. Default 4000. */
  maxDelayMs?: number;
  /**
   * Give up when no attempt has delivered anything for this long: the stream then ends with an
   * `error` chunk. Default: twice the server's LEASE_MS plus 5 s (it says it in
   * `x-rindle-lease-ms`; 25 s with the default 10 s lease), else 30000. A stream whose object was
   * lost is sealed within about LEASE_MS, and its own ending (saying how much was saved) then
   * reaches the page, so keep this above LEASE_MS.
   */
  giveUpAfterMs?: number;
}

/** One reconnect, as reported to `onReconnect`. */
export interface ReconnectEvent {
  streamId: string;
  /** The UTF-16 offset the next attempt resumes from (the last `id:` received). */
  from: number;
  /** Failed attempts in a row (0 right after a connection that delivered something). */
  attempt: number;
  delayMs: number;
  reason: string;
}

/** Where an answer streams: what the app's chat endpoint answers. */
export interface StreamRef {
  streamId: string;
  /** A token with `read cancel` scope for `streamId` (SPEC §4). */
  token?: string;
}

type HeadersValue = Record<string, string> | Headers;
type Resolvable<T> = T | (() => T | Promise<T>);

export interface RindleChatTransportOptions<UI_MESSAGE extends UIMessage = UIMessage> {
  /** The app's chat endpoint. Default `/api/chat`. */
  api?: string;
  /** Origin of the rindle-streams Worker. Default: the page's own origin (`''`). */
  streamsUrl?: string;
  /** The Worker's PATH_PREFIX. Default `/streams`. */
  prefix?: string;
  /** Headers for the app's endpoint (not for the stream API, which takes the token). */
  headers?: Resolvable<HeadersValue>;
  /** Extra JSON fields of the POST to the app's endpoint. */
  body?: Resolvable<object>;
  /** For every request: the app's endpoint, the `/ui` reads and the cancel (a function is called each time). */
  credentials?: Resolvable<RequestCredentials>;
  /** Used for every request: the app's endpoint and the stream API. Default: the global fetch. */
  fetch?: typeof globalThis.fetch;
  /** Shape the POST to the app's endpoint, like `DefaultChatTransport`'s option of that name. */
  prepareSendMessagesRequest?: (options: {
    id: string;
    messages: UI_MESSAGE[];
    requestMetadata: unknown;
    body: Record<string, any> | undefined;
    credentials: RequestCredentials | undefined;
    headers: HeadersValue | undefined;
    api: string;
    trigger: 'submit-message' | 'regenerate-message';
    messageId: string | undefined;
  }) => PrepareResult | PromiseLike<PrepareResult>;
  /** Shape the GET of the chat's active answer. */
  prepareReconnectToStreamRequest?: (options: {
    id: string;
    /** The answer to resume by name (`attach`, from a chat feed's turn); the default GET adds `?answer=`. */
    answer: string | undefined;
    requestMetadata: unknown;
    body: Record<string, any> | undefined;
    credentials: RequestCredentials | undefined;
    headers: HeadersValue | undefined;
    api: string;
  }) => Omit<PrepareResult, 'body'> | PromiseLike<Omit<PrepareResult, 'body'>>;
  /**
   * `stop()` cancels the answer (POST …/cancel) so the producer stops and every reader gets
   * `abort`. Default true. With false, `stop()` only stops this page's reading.
   */
  cancelOnStop?: boolean;
  retry?: RetryOptions;
  onReconnect?: (event: ReconnectEvent) => void;
}

interface PrepareResult {
  body?: object;
  headers?: HeadersValue;
  credentials?: RequestCredentials;
  api?: string;
}

/** The app's endpoint or the stream API answered with an error. */
export class ChatTransportError extends Error {
  name: 'ChatTransportError';
  status?: number;
  /** The SPEC §4 error code, when the answer had one. */
  code?: string;
  url?: string;
}

export class RindleChatTransport<UI_MESSAGE extends UIMessage = UIMessage> implements ChatTransport<UI_MESSAGE> {
  constructor(options?: RindleChatTransportOptions<UI_MESSAGE>);
  /**
   * Always true: `reconnectToStream` replays the answer from its start, and the SDK (ai >=
   * 7.0.137) starts the message over at the replay's `start` chunk. The transport warns once
   * when the SDK that resumed did not read it.
   */
  readonly resumeStreamIsReplay: true;
  sendMessages(
    options: {
      trigger: 'submit-message' | 'regenerate-message';
      chatId: string;
      messageId: string | undefined;
      messages: UI_MESSAGE[];
      abortSignal: AbortSignal | undefined;
    } & ChatRequestOptions,
  ): Promise<ReadableStream<UIMessageChunk>>;
  reconnectToStream(
    options: { chatId: string; abortSignal?: AbortSignal } & ChatRequestOptions,
  ): Promise<ReadableStream<UIMessageChunk> | null>;
  /** Stop every reader this transport started, without cancelling the answers. */
  close(): void;
  /**
   * The next `reconnectToStream` resumes the answer `streamId` (a turn the chat's feed announced:
   * chat-feed.js's `syncChat` calls it, then `chat.resumeStream()`): the app's endpoint is asked for
   * it by name, `GET {api}/{chatId}/stream?answer={streamId}`.
   */
  attach(streamId: string): void;
}

export interface ReadUIStreamOptions extends Omit<StreamRef, 'token'> {
  /**
   * A token with `read` scope for `streamId`, or a function giving one, asked again before every
   * connection (`reason` is `'refused'` after a 401/403: give a fresh one; one more try is made).
   * A connection ends at its token's `exp`; the reconnect resumes from the last `id:`.
   */
  token?: string | ((reason?: 'refused') => string | undefined | Promise<string | undefined>);
  streamsUrl?: string;
  prefix?: string;
  /** UTF-16 offset to start from (a line start or an `id:` received earlier). Default 0. */
  from?: number;
  fetch?: typeof globalThis.fetch;
  credentials?: RequestCredentials;
  retry?: RetryOptions;
  onReconnect?: (event: ReconnectEvent) => void;
}

/**
 * Read a `ui` stream (GET …/ui) from `from` to its ending across dropped connections: every
 * chunk once and in order, ending with `finish`, `abort` or `error`. It reads the network only
 * as fast as it is read (backpressure). Cancel it to stop reading.
 */
export function readUIStream(options: ReadUIStreamOptions): ReadableStream<UIMessageChunk>;

/** When a JWT expires (its `exp`, as ms since the epoch), read without verifying it; `undefined` if it has none. */
export function tokenExpiresAt(token: string | undefined | null): number | undefined;

/** An incremental SSE parser (WHATWG rules): `push` text, get one callback per event. */
export function createSseParser(onEvent: (event: { id?: string; data?: string; retry?: number }) => void): {
  push(text: string): void;
  reset(): void;
};
