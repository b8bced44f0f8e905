// The example chat page: React 19, `useChat` from @ai-sdk/react, and rindle-streams'
// ChatTransport. Bundled by ../build.mjs (esbuild, no CDN) into ../dist/app.js.
//
// The chat id lives in the URL (?chat=…), so a reload or a second tab opens the same chat: the
// page loads the finished messages from the app, and `resume: true` replays an answer that is
// still streaming. Test knobs: ?giveUpAfterMs=N (the transport's reconnect budget).
import { StrictMode, useState } from 'react';
import { createRoot } from 'react-dom/client';
import { useChat } from '@ai-sdk/react';
import { RindleChatTransport } from '../../../public/chat-transport.js';

const params = new URLSearchParams(location.search);
let chatId = params.get('chat');
if (!chatId) {
  chatId = `c-${crypto.randomUUID().slice(0, 8)}`;
  params.set('chat', chatId);
  history.replaceState(null, '', `?${params}`);
}
const giveUpAfterMs = Number(params.get('giveUpAfterMs'));
window.rindleReconnects = []; // every reconnect the transport made, for the curious (and the tests)
const transport = new RindleChatTransport({
  api: '/api/chat',
  retry: giveUpAfterMs > 0 ? { giveUpAfterMs } : undefined,
  onReconnect: (event) => window.rindleReconnects.push(event),
});

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

function Chat({ initialMessages }) {
  const { messages, sendMessage, status, stop, error } = useChat({ id: chatId, messages: initialMessages, transport, resume: true });
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
        <h1>AI SDK chat on rindle-streams</h1>
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
  const { messages } = res.ok ? await res.json() : { messages: [] };
  createRoot(document.getElementById('root')).render(
    <StrictMode>
      <Chat initialMessages={messages} />
    </StrictMode>,
  );
}
main();
