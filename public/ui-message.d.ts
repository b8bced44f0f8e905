// Types for ui-message.js: an answer read back as an AI SDK `UIMessage`, on the server.
// `ai` is referenced for its types only; the module itself imports nothing but client.js.
import type { UIMessage, UIMessageChunk, readUIMessageStream as ReadUIMessageStream } from 'ai';
import type { ChunkRow } from './client.js';

/** A message row as the app's table holds it: its body and, while it streams, its chunk rows. */
export interface MessageRow {
  id?: string;
  body: string | null | undefined;
  chunks?: readonly ChunkRow[];
}

/** Where the stream API is, to read `/text` (a `read` token for `streamId`). */
export type TextSource =
  | { streamId: string; token?: string; service: { fetch(request: Request): Promise<Response> }; prefix?: string }
  | { streamId: string; token?: string; baseUrl: string; prefix?: string; fetch?: typeof globalThis.fetch };

export type ReadUIMessageOptions = {
  /** The AI SDK's own `readUIMessageStream` (import { readUIMessageStream } from 'ai'). */
  readUIMessageStream: typeof ReadUIMessageStream;
  /** The message id when the text has no `start` chunk with a `messageId`. */
  id?: string;
} & ({ text: string } | { row: MessageRow } | TextSource);

/**
 * An answer as a `UIMessage`: from its NDJSON text, its row (body + chunk rows, assembled as
 * `/text` assembles them), or the stream API's `/text`. Only complete lines are chunks.
 */
export declare function readUIMessage<UI_MESSAGE extends UIMessage = UIMessage>(options: ReadUIMessageOptions): Promise<UI_MESSAGE>;

/** The UI message chunks of a `ui` stream's text: its complete lines, parsed. */
export declare function uiChunksOf(text: string | null | undefined): UIMessageChunk[];
