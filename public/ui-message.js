// rindle-streams: read an answer back as an AI SDK `UIMessage` on the server (a chat's history,
// a search index, an export), from the stream API's `/text` or from the message row itself.
// Dependency-free; vendor it with client.js (it imports its assembly from there). Types:
// ui-message.d.ts. producer.js and chat-transport.js re-export `readUIMessage`.
//
//   import { readUIMessageStream } from 'ai';
//   import { readUIMessage } from './ui-message.js';
//   // from the row (D1): the body, then the chunk rows of an answer still streaming
//   const message = await readUIMessage({ row: { id, body, chunks }, readUIMessageStream });
//   // or from the stream API (a `read` token)
//   const message = await readUIMessage({ service: env.RINDLE, streamId, token, readUIMessageStream });
//
// It is the same assembly the page's reader gets: the durable text is the row's body followed
// by its chunk rows in `seq` order, offset-aware (`assembleDurableText`, as the Worker's own
// `/text`), and only complete NDJSON lines are chunks (an unfinished last line never is, as on
// `/ui`). The chunks become the message through the AI SDK's own `readUIMessageStream` (what
// `useChat` runs), passed in so this module imports nothing.
import { assembleDurableText } from './client.js';

/** The UI message chunks of a `ui` stream's text: its complete lines, parsed. */
export function uiChunksOf(text) {
  const lines = String(text ?? '').split('\n');
  lines.pop(); // the unfinished last line ('' when the text ends in \n) never became a chunk
  return lines.filter((line) => line.trim() !== '').map((line) => JSON.parse(line));
}

/**
 * An answer as a `UIMessage`, from one of:
 * - `text`: the NDJSON durable text (what `/text` answers);
 * - `row`: `{ id?, body, chunks? }`, the message row and its chunk rows (`{ seq, text }`);
 * - the stream API: `{ streamId, token, service | baseUrl, prefix? }` (GET …/text).
 * The message's id is the `start` chunk's `messageId`, else `id` (or `row.id`, `streamId`).
 * Resolves with the message (a partial answer gives the parts so far).
 */
export async function readUIMessage({ readUIMessageStream, text, row, id, ...api }) {
  if (typeof readUIMessageStream !== 'function') {
    throw new TypeError("readUIMessage: pass the AI SDK's readUIMessageStream (import { readUIMessageStream } from 'ai')");
  }
  const durable = text ?? (row ? assembleDurableText(row.body, row.chunks ?? []) : await readText(api));
  const chunks = uiChunksOf(durable);
  let message = { id: id ?? row?.id ?? api.streamId ?? '', role: 'assistant', parts: [] };
  const stream = new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(chunk);
      controller.close();
    },
  });
  // An `error` chunk is part of the answer as the page showed it; the parts before it stay.
  for await (const snapshot of readUIMessageStream({ stream, message, onError: () => {} })) message = snapshot;
  return message;
}

/** GET {prefix}/{streamId}/text through a service binding or a base URL. */
async function readText({ streamId, token, service, baseUrl, prefix = '/streams', fetch: fetchImpl }) {
  if (!streamId || (!service && baseUrl == null)) {
    throw new TypeError('readUIMessage: pass `text`, `row`, or `streamId` with `service` or `baseUrl`');
  }
  const origin = service ? 'https://rindle.internal' : String(baseUrl).replace(/\/+$/, '');
  const request = new Request(`${origin}${prefix}/${encodeURIComponent(streamId)}/text`, {
    headers: token == null ? {} : { authorization: `Bearer ${token}` },
  });
  const res = await (service ? service.fetch(request) : (fetchImpl ?? globalThis.fetch)(request));
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw Object.assign(new Error(`readUIMessage: ${res.status} ${body.error ?? ''} ${body.message ?? ''}`.trim()), { status: res.status, code: body.error });
  return body.text ?? '';
}
