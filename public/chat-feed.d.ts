// Types for chat-feed.js: one conversation, live on every tab and device (SPEC §11).
// `ai` is referenced for its types only; the module itself imports nothing.
import type { UIMessage } from 'ai';

/** What `syncChat` needs of the AI SDK's `Chat` (from `@ai-sdk/react`, or `ai`'s AbstractChat). */
export interface SyncableChat<UI_MESSAGE extends UIMessage = UIMessage> {
  readonly id: string;
  messages: UI_MESSAGE[];
  readonly status: 'submitted' | 'streaming' | 'ready' | 'error';
  resumeStream(): Promise<void>;
}

/** A transport that can resume an answer by name: `RindleChatTransport`. */
export interface AttachingTransport {
  attach(streamId: string): void;
}

/** One event of a chat's feed, as `GET {prefix}/chats/{chatId}/events` sends it. */
export type FeedEvent =
  | { type: 'user'; streamId: string; message: UIMessage }
  | { type: 'start'; streamId: string; messageId: string; format?: 'text' | 'ui' }
  | { type: 'end'; streamId: string; status: 'complete' | 'cancelled' | 'error' | 'interrupted'; durableSeq: number }
  | { type: 'reload' }
  | { type: 'ready' };

export interface SyncChatOptions<UI_MESSAGE extends UIMessage = UIMessage> {
  /** The chat's transport: it attaches the answers the feed announces. */
  transport: AttachingTransport;
  /**
   * A token with `read` scope and a `chat` claim naming the chat (`signStreamToken({ chat, scope:
   * 'read' })`), or a function giving one, asked again before every connection. A connection ends
   * at its token's `exp`: with a function the session reconnects at once with a fresh token,
   * missing nothing; with a string, the reconnect after `exp` is refused (and retried with backoff).
   */
  token?: string | (() => string | Promise<string>);
  /**
   * What a hidden page does: `'wait'` (default) keeps the feed but attaches no answer until the
   * page is shown again, then applies what came, in order; `false` applies turns as they come.
   */
  whileHidden?: 'wait' | false;
  /** The chat's id. Default `chat.id`. */
  chatId?: string;
  /** Origin of the rindle-streams Worker. Default: the page's own origin (`''`). */
  streamsUrl?: string;
  /** The Worker's PATH_PREFIX. Default `/streams`. */
  prefix?: string;
  /** The answer the app's history left out because it was in flight: attached first, once. */
  active?: string;
  /** The chat's messages from the app, when the feed says this tab was away past its history. */
  reload?: () => Promise<UI_MESSAGE[]>;
  /** The feed's reconnects after a refused connection (an `EventSource` reconnects a dropped one by itself). Defaults 1 s doubling to 30 s. */
  retry?: { initialDelayMs?: number; maxDelayMs?: number };
  /** An `EventSource` implementation. Default: the global one. */
  EventSource?: typeof globalThis.EventSource;
  /** Every feed event, as it arrives (logs, tests). */
  onEvent?: (event: FeedEvent) => void;
  /** Every answer attached (logs, tests). */
  onAttach?: (info: { streamId: string }) => void;
}

/**
 * Keep `chat` in step with its feed: turns started elsewhere appear (their user message, then the
 * answer, attached through the transport's resume path), nothing is shown twice. Returns the
 * cleanup, for `useEffect(() => syncChat(chat, options), [chat])`. One subscription per chat, under
 * React StrictMode too.
 */
export function syncChat<UI_MESSAGE extends UIMessage>(chat: SyncableChat<UI_MESSAGE>, options: SyncChatOptions<UI_MESSAGE>): () => void;

/** A turn as the feed told it. */
export interface FeedTurn<UI_MESSAGE extends UIMessage = UIMessage> {
  streamId: string;
  user?: UI_MESSAGE;
  start?: { streamId: string; messageId: string; format?: 'text' | 'ui' };
  end?: { status: string; durableSeq: number };
}

/** What to do for a turn given the chat's messages (the decision `syncChat` applies). */
export function planTurn<UI_MESSAGE extends UIMessage>(
  messages: UI_MESSAGE[],
  turn: FeedTurn<UI_MESSAGE>,
  attached?: 'attaching' | 'done' | 'failed',
): { messages?: UI_MESSAGE[]; attach: boolean };

/** Of a new reader's replay, the turns to apply: from the last one the chat shows anything of. */
export function turnsToApply<UI_MESSAGE extends UIMessage>(messages: UI_MESSAGE[], turns: FeedTurn<UI_MESSAGE>[]): FeedTurn<UI_MESSAGE>[];
