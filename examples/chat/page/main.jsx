// The example chat page: React 19, `useChat` from @ai-sdk/react, and either rindle-streams'
// ChatTransport (the default) or the AI SDK's own DefaultChatTransport (?transport=stock).
// Bundled by ../build.mjs (esbuild, no CDN) into ../dist/app.js.
//
// The chat id lives in the URL (?chat=…), so a reload or a second tab opens the same chat: the
// page loads the chat's history from the app, with the answer still in flight that it leaves
// out, and `resume: true` replays that answer. Test knobs: ?giveUpAfterMs=N (the rindle
// transport's reconnect budget).
import { StrictMode, useState } from 'react';
import { createRoot } from 'react-dom/client';
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport } from 'ai';
import { RindleChatTransport } from '../../../public/chat-transport.js';

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

/**
 * The transport. `active`: the answer the history left out because it was in flight when read
 * (`{streamId, token}`); resuming names it, so it is replayed whatever it has become since (it
 * may have finished in between). `chatToken`: reads the chat's answers (the stock resume GET).
 */
function makeTransport({ active, chatToken }) {
  if (stock) {
    // The AI SDK's own transport, no rindle code: answers come back on the POST, and the resume
    // GET is rindle's (SPEC §9): the answer left out, or the chat's answer in flight now / 204.
    return new DefaultChatTransport({
      api: '/api/chat/stock',
      prepareReconnectToStreamRequest: ({ id }) => ({
        api: active
          ? `/streams/${encodeURIComponent(active.streamId)}/ui?token=${encodeURIComponent(active.token)}`
          : `/streams/chats/${encodeURIComponent(id)}/stream?token=${encodeURIComponent(chatToken)}`,
      }),
    });
  }
  return new RindleChatTransport({
    api: '/api/chat',
    prepareReconnectToStreamRequest: ({ id }) => ({
      api: `/api/chat/${encodeURIComponent(id)}/stream${active ? `?answer=${encodeURIComponent(active.streamId)}` : ''}`,
    }),
    retry: giveUpAfterMs > 0 ? { giveUpAfterMs } : undefined,
    onReconnect: (event) => window.rindleReconnects.push(event),
  });
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

function Chat({ initialMessages, transport }) {
  const { messages, sendMessage, status, stop, error } = useChat({
    id: chatId,
    messages: initialMessages,
    transport,
    resume: true,
    onError: (e) => window.chatErrors.push(e.message),
  });
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

async function main() {
  const res = await fetch(`/api/chat/${encodeURIComponent(chatId)}/messages`);
  const history = res.ok ? await res.json() : { messages: [] };
  const transport = makeTransport(history);
  createRoot(document.getElementById('root')).render(
    <StrictMode>
      <Chat initialMessages={history.messages} transport={transport} />
    </StrictMode>,
  );
}
main();
