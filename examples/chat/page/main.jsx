// The example chat page: React 19, the AI SDK's `Chat` and `useChat` from @ai-sdk/react, and
// either rindle-streams' ChatTransport with the chat's feed (the default) or the AI SDK's own
// DefaultChatTransport (?transport=stock). Bundled by ../build.mjs (esbuild, no CDN) into
// ../dist/app.js (React's production build) and ../dist/app.dev.js (its development build, where
// StrictMode mounts every effect twice: ?react=development).
//
// The chat id lives in the URL (?chat=…), so a reload, a second tab or a second browser opens the
// same chat: the page loads the chat's history from the app, with the answer still in flight that
// it leaves out. With rindle's transport the page follows the chat's feed (public/chat-feed.js):
// a turn started in another tab or browser appears by itself, the answer in flight is attached
// once, nothing shows twice. Test knobs: ?giveUpAfterMs=N (the transport's reconnect budget).
import { StrictMode, useEffect, useState } from 'react';
import { createRoot } from 'react-dom/client';
import { Chat, useChat } from '@ai-sdk/react';
import { DefaultChatTransport } from 'ai';
import { RindleChatTransport, tokenExpiresAt } from '../../../public/chat-transport.js';
import { syncChat } from '../../../public/chat-feed.js';

const params = new URLSearchParams(location.search);
let chatId = params.get('chat');
if (!chatId) {
  chatId = `c-${crypto.randomUUID().slice(0, 8)}`;
  params.set('chat', chatId);
  history.replaceState(null, '', `?${params}`);
}
const giveUpAfterMs = Number(params.get('giveUpAfterMs'));
const stock = params.get('transport') === 'stock';
window.rindleReconnects = []; // every reconnect the transport made, for the curious (and the tests)
window.chatErrors = []; // every error useChat reported (onError), for the tests
window.feedEvents = []; // every event of the chat's feed
window.feedAttaches = []; // every answer the feed made this page attach

/**
 * The id of the last message the page showed. A regeneration or an edit replaces what followed
 * its question, and the app replaces only up to this (`seen`): never a turn another tab added that
 * this page has not shown yet.
 */
let lastShown;
const seen = () => ({ seen: lastShown });

const loadHistory = async () => {
  const res = await fetch(`/api/chat/${encodeURIComponent(chatId)}/messages`);
  return res.ok ? res.json() : { messages: [] };
};

/**
 * The chat feed's token: the one the history came with, until it is within 10 s of its exp; then a
 * fresh one from the app. syncChat asks before every connection (a connection ends at its token's
 * exp, and the session reconnects at once, missing nothing).
 */
function chatTokens(first) {
  let current = first;
  window.chatTokensMinted = 0;
  return async () => {
    if ((tokenExpiresAt(current) ?? Infinity) - Date.now() > 10_000) return current;
    const res = await fetch(`/api/chat/${encodeURIComponent(chatId)}/token`);
    if (!res.ok) throw new Error(`the chat's token: ${res.status}`);
    current = (await res.json()).chatToken;
    window.chatTokensMinted += 1;
    return current;
  };
}

function Part({ part }) {
  if (part.type === 'text') return <p className="part" data-type="text" data-state={part.state}>{part.text}</p>;
  if (part.type === 'reasoning') {
    return (
      <details className="part" data-type="reasoning" data-state={part.state} open>
        <summary>Reasoning</summary>
        <div className="text">{part.text}</div>
      </details>
    );
  }
  if (part.type === 'step-start') return <hr className="part" data-type="step-start" />;
  if (part.type.startsWith('tool-') || part.type === 'dynamic-tool') {
    return (
      <div className="part" data-type={part.type} data-state={part.state} data-tool-call-id={part.toolCallId}>
        <div>🔧 {part.type.slice(5)} · {part.state}</div>
        {part.input !== undefined && <pre className="input">{JSON.stringify(part.input)}</pre>}
        {part.output !== undefined && <pre className="output">{JSON.stringify(part.output)}</pre>}
        {part.errorText && <pre className="error">{part.errorText}</pre>}
      </div>
    );
  }
  return <pre className="part" data-type={part.type}>{JSON.stringify(part)}</pre>;
}

function ChatView({ chat: { messages, sendMessage, status, stop, error } }) {
  lastShown = messages.at(-1)?.id;
  const [input, setInput] = useState('');
  const busy = status === 'submitted' || status === 'streaming';
  const submit = (event) => {
    event.preventDefault();
    if (!input.trim() || busy) return;
    sendMessage({ text: input });
    setInput('');
  };
  return (
    <>
      <header>
        <h1>AI SDK chat on rindle-streams{stock ? ' (stock transport)' : ''}</h1>
        <span id="status" data-status={status}>{status}</span>
        <span className="chat-id">chat {chatId}</span>
        <a href={location.href} target="_blank" rel="noreferrer">open in another tab</a>
      </header>
      {error && <div id="error">{error.message}</div>}
      <section id="messages">
        {messages.map((m) => (
          <article key={m.id} className="message" data-id={m.id} data-role={m.role}>
            <div className="role">{m.role}</div>
            {m.parts.map((part, i) => <Part key={i} part={part} />)}
          </article>
        ))}
      </section>
      <form onSubmit={submit}>
        <input id="prompt" value={input} onChange={(e) => setInput(e.target.value)} placeholder="Ask about the weather…" autoComplete="off" />
        <button id="send" type="submit" disabled={busy}>Send</button>
        <button id="stop" type="button" disabled={!busy} onClick={() => stop()}>Stop</button>
      </form>
    </>
  );
}

const onError = (e) => window.chatErrors.push(e.message);

/** rindle's transport, and the chat's feed: every turn of the chat, from any tab, live. */
function FeedChat({ history, transport }) {
  const [chat] = useState(() => new Chat({ id: chatId, messages: history.messages, transport, onError }));
  useEffect(() => {
    window.syncChatCalls = (window.syncChatCalls ?? 0) + 1; // StrictMode (React's development build) calls it twice
    return syncChat(chat, {
      transport,
      token: chatTokens(history.chatToken),
      active: history.active?.streamId,
      reload: async () => (await loadHistory()).messages,
      onEvent: (event) => window.feedEvents.push(event),
      onAttach: (attach) => window.feedAttaches.push(attach),
    });
  }, [chat]);
  return <ChatView chat={useChat({ chat })} />;
}

/** The AI SDK's own transport: the answer in flight at load is resumed by `useChat` itself. */
function StockChat({ history }) {
  const [transport] = useState(
    () =>
      new DefaultChatTransport({
        api: '/api/chat/stock',
        body: seen,
        // The resume GET is rindle's (SPEC §9): the answer the history left out, or the chat's answer in flight now / 204.
        prepareReconnectToStreamRequest: ({ id }) => ({
          api: history.active
            ? `/streams/${encodeURIComponent(history.active.streamId)}/ui?token=${encodeURIComponent(history.active.token)}`
            : `/streams/chats/${encodeURIComponent(id)}/stream?token=${encodeURIComponent(history.chatToken)}`,
        }),
      }),
  );
  return <ChatView chat={useChat({ id: chatId, messages: history.messages, transport, resume: true, onError })} />;
}

async function main() {
  const history = await loadHistory();
  const transport = stock
    ? null
    : new RindleChatTransport({
        api: '/api/chat',
        body: seen,
        retry: giveUpAfterMs > 0 ? { giveUpAfterMs } : undefined,
        onReconnect: (event) => window.rindleReconnects.push(event),
      });
  createRoot(document.getElementById('root')).render(
    <StrictMode>{stock ? <StockChat history={history} /> : <FeedChat history={history} transport={transport} />}</StrictMode>,
  );
}
main();
