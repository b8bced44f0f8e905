// Type-checked (never run) by tests/ai/types.test.mjs with the real `ai` types: the `.d.ts` files
// in public/ must describe modules an AI SDK app can use as the README shows, and they must not
// be `any` (each `@ts-expect-error` below fails the check if the type let the mistake through).
import { readUIMessageStream, streamText, type ChatTransport, type UIMessage, type UIMessageChunk } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';
import { RindleChatTransport, readUIStream, type ReconnectEvent } from '../../../public/chat-transport.js';
import { openStream, signStreamToken, encodeUIChunk, RindleError, readUIMessage, RESUME_DEFAULTS, backoffDelay, resumeCause, KeptText, ResumeGapError } from '../../../public/producer.js';
import { readUIMessage as readUIMessageInThePage } from '../../../public/chat-transport.js';
import { followStream, applyFrame, initialState, type Frame } from '../../../public/client.js';
import { syncChat, type FeedEvent } from '../../../public/chat-feed.js';
import type { Chat } from '@ai-sdk/react';

type Env = { RINDLE: { fetch(request: Request): Promise<Response> }; STREAM_JWT_SECRET: string };

// The page: the transport is an AI SDK ChatTransport.
const transport: ChatTransport<UIMessage> = new RindleChatTransport({
  api: '/api/chat',
  retry: { giveUpAfterMs: 5_000 },
  onReconnect: (e: ReconnectEvent) => void e.from.toFixed(),
});
// @ts-expect-error the retry budget is a number of milliseconds
new RindleChatTransport({ retry: { giveUpAfterMs: '5s' } });
void transport;

// The producer: open, pipe the model's UI message stream, learn of a cancel.
export async function produce(env: Env, answerId: string): Promise<string> {
  const token = await signStreamToken({ secret: env.STREAM_JWT_SECRET, stream: answerId, scope: 'write' });
  const stream = await openStream({ service: env.RINDLE, streamId: answerId, token, format: 'ui', meta: { chatId: 'c1' } });
  const result = streamText({ model: new MockLanguageModelV4({}), prompt: 'hi', abortSignal: stream.signal });
  const end = await stream.pipe(result.toUIMessageStream({ generateMessageId: () => answerId }));
  await stream.append({ type: 'text-delta', id: 't1', delta: 'more' } satisfies UIMessageChunk);
  // @ts-expect-error a ui stream takes UI message chunks, not strings
  await stream.append('plain text');
  const text = await openStream({
    baseUrl: 'http://127.0.0.1:8787',
    streamId: `${answerId}-text`,
    token,
    // Surviving a reset (SPEC §10): the policy and a hook; `resume: false` turns it off.
    resume: { timeoutMs: RESUME_DEFAULTS.timeoutMs * 2 },
    onResume: ({ cause, seq, epoch, resent }) => console.log(cause satisfies 'connection' | 'reset' | 'not_open' | 'resume_required', seq, epoch, resent),
  });
  const epoch: number | undefined = text.epoch;
  void epoch;
  void (await openStream({ baseUrl: 'http://x', streamId: 'x', token, resume: false }));
  // The watch (a cancel heard in any state) is on by default; `false` turns it off.
  void (await openStream({ baseUrl: 'http://x', streamId: 'x', token, watch: false }));
  // @ts-expect-error the watch is on or off
  void (await openStream({ baseUrl: 'http://x', streamId: 'x', token, watch: 'yes' }));
  // @ts-expect-error the resume policy's fields are numbers
  void (await openStream({ baseUrl: 'http://x', streamId: 'x', token, resume: { timeoutMs: '60s' } }));
  const kept = new KeptText(0);
  kept.push('👍');
  const tail: string = kept.from(0);
  void [tail, backoffDelay(3), resumeCause(new Error('x')), new ResumeGapError('x') instanceof Error];
  await text.pipe(result.textStream);
  // @ts-expect-error a text stream takes strings, not chunks
  await text.append({ type: 'text-delta', id: 't1', delta: 'x' });
  const line: string = encodeUIChunk({ type: 'finish' });
  // flush answers the committed length; it says nothing of a cancel (issue 38: the type said it did).
  const flushed = await stream.flush();
  void flushed.durableSeq;
  // @ts-expect-error flush's answer has no `cancelled`
  void flushed.cancelled;
  // A route handler that answers the browser itself writes a copy through rindle.
  const response = result.toUIMessageStreamResponse({ consumeSseStream: (sse) => void stream.consumeSseStream(sse) });
  void response;
  try {
    await text.close();
  } catch (e) {
    if (e instanceof RindleError) return `${e.status} ${e.code}`;
  }
  return `${end.status} ${end.durableSeq} ${line}`;
}

// A reader without useChat: the same chunks the AI SDK builds a message from.
export async function read(streamId: string, token: string): Promise<UIMessage | undefined> {
  let last: UIMessage | undefined;
  for await (const message of readUIMessageStream({ stream: readUIStream({ streamId, token, from: 0 }) })) last = message;
  return last;
}

// The plain-text reader.
const handle = followStream({ streamId: 'm1', token: 't', onText: (text: string, seq: number) => void text.slice(seq) });
const frame: Frame = { type: 'end', seq: 3, status: 'complete' };
const state = applyFrame(initialState(''), frame);
// @ts-expect-error a status is one of the four end statuses
const wrong: Frame = { type: 'end', seq: 3, status: 'done' };
void handle;
void state.durableSeq;
void wrong;

// The answer read back on the server, from the row or the stream API.
export async function history(env: Env, row: { id: string; body: string; chunks: { seq: number; text: string }[] }): Promise<string> {
  const fromRow: UIMessage = await readUIMessage({ row, readUIMessageStream });
  const fromApi = await readUIMessageInThePage({ service: env.RINDLE, streamId: row.id, token: 't', readUIMessageStream });
  // @ts-expect-error the SDK's readUIMessageStream is required (the module imports nothing)
  await readUIMessage({ row });
  return `${fromRow.id} ${fromApi.parts.length}`;
}

// One conversation everywhere (SPEC §11): the producer names the chat and the user's message, the
// page syncs its Chat with the chat's feed.
export async function chatTurn(env: Env, answerId: string, question: UIMessage): Promise<void> {
  const token = await signStreamToken({ secret: env.STREAM_JWT_SECRET, stream: answerId, scope: 'write' });
  await openStream({ service: env.RINDLE, streamId: answerId, token, format: 'ui', chat: { id: 'c1', userMessage: question } });
  // @ts-expect-error a chat is named by its id
  await openStream({ service: env.RINDLE, streamId: answerId, token, chat: 'c1' });
}

export function page(chat: Chat<UIMessage>, chatToken: string): () => void {
  const rindle = new RindleChatTransport({ api: '/api/chat', prepareReconnectToStreamRequest: ({ id, answer }) => ({ api: `/api/chat/${id}/stream?answer=${answer ?? ''}` }) });
  const stop = syncChat(chat, {
    transport: rindle,
    token: async () => chatToken,
    active: 'a-1',
    reload: async () => [] as UIMessage[],
    onEvent: (event: FeedEvent) => void (event.type === 'end' ? event.durableSeq.toFixed() : event.type),
  });
  // @ts-expect-error syncChat needs a transport that attaches answers (DefaultChatTransport does not)
  syncChat(chat, { transport: {} });
  return stop;
}
