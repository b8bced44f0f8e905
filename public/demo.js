// The demo page: start a mock model response through the Worker and follow it as a reader.
// `/?join=<id>&token=<readToken>` joins an existing stream mid-flight as a reader only.
// Needs the Worker's dev endpoints (DEV_MODE = "1"): POST /dev/session mints a message row and tokens.
import { followStream } from './client.js';

const $ = (id) => document.getElementById(id);
const PREFIX = '/streams';

// Each upstream API: its path on the mock, its auth headers, and a realistic streaming request body.
const PROMPT = 'Explain, with plenty of emoji, how a response can stream to many readers and still be durable.';
const UPSTREAMS = {
  'openai-chat': {
    path: '/v1/chat/completions',
    headers: { authorization: 'Bearer mock-key' },
    body: { model: 'gpt-4o-mini', stream: true, messages: [
      { role: 'system', content: 'You are a concise assistant.' },
      { role: 'user', content: PROMPT },
    ] },
  },
  'openai-responses': {
    path: '/v1/responses',
    headers: { authorization: 'Bearer mock-key' },
    body: { model: 'gpt-4o-mini', stream: true, instructions: 'You are a concise assistant.', input: PROMPT },
  },
  anthropic: {
    path: '/v1/messages',
    headers: { 'x-api-key': 'mock-key', 'anthropic-version': '2023-06-01' },
    body: { model: 'claude-3-5-haiku-latest', max_tokens: 1024, stream: true, messages: [{ role: 'user', content: PROMPT }] },
  },
};

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Call the Worker; a non-2xx answer becomes an ApiError carrying its `{error, message}`. */
async function api(method, path, { token, body } = {}) {
  const headers = {};
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const raw = await res.text();
  let data = null;
  try {
    data = raw ? JSON.parse(raw) : null;
  } catch {
    data = null;
  }
  if (!res.ok) throw new ApiError(res.status, data?.error ?? `http_${res.status}`, data?.message ?? (raw || res.statusText));
  return data;
}

const streamPath = (id, action) => `${PREFIX}/${encodeURIComponent(id)}/${action}`;

// ---------------------------------------------------------------- view

function showError(err) {
  const el = $('error');
  el.textContent = err instanceof ApiError ? `${err.code} (${err.status}): ${err.message}` : String(err?.message ?? err);
  el.hidden = false;
}

function setStatus(status, detail) {
  const el = $('status');
  el.dataset.status = status;
  el.textContent = status;
  $('status-detail').textContent = detail ?? '';
}

/** The largest offset ≤ `at` that does not split a surrogate pair, so both halves render. */
function safeCut(text, at) {
  const n = Math.min(at, text.length);
  const unit = text.charCodeAt(n - 1);
  return n > 0 && unit >= 0xd800 && unit <= 0xdbff ? n - 1 : n;
}

function render(handle) {
  const { text, seq, durableSeq } = handle;
  const cut = safeCut(text, durableSeq);
  const live = $('live-text');
  const following = live.scrollTop + live.clientHeight >= live.scrollHeight - 8;
  live.querySelector('.durable').textContent = text.slice(0, cut);
  live.querySelector('.tail').textContent = text.slice(cut);
  if (following) live.scrollTop = live.scrollHeight; // keep the newest text in view, unless scrolled up
  $('seq').textContent = String(seq);
  $('durable-seq').textContent = String(durableSeq);
  $('bar-durable').style.width = seq > 0 ? `${(100 * Math.min(durableSeq, seq)) / seq}%` : '0%';
}

/** What the mock upstream was asked for, as text and as data-* (format, tokens, rate, seed, fail). */
function showUpstream(format, query) {
  const el = $('upstream');
  const q = Object.fromEntries(query);
  el.textContent = `${format}, ${q.tokens} tokens at ${q.rate === '0' ? 'full speed' : `${q.rate}/s`}, seed ${q.seed}` +
    (q.fail ? `, failure: ${q.fail}` : '');
  Object.assign(el.dataset, { format, ...q });
}

function resetView() {
  $('error').hidden = true;
  $('upstream').textContent = '';
  for (const key of Object.keys($('upstream').dataset)) delete $('upstream').dataset[key];
  $('readback').hidden = true;
  $('live-text').querySelector('.durable').textContent = '';
  $('live-text').querySelector('.tail').textContent = '';
  for (const id of ['seq', 'durable-seq']) $(id).textContent = '0';
  $('bar-durable').style.width = '0%';
}

function setStreaming(on, { canCancel }) {
  $('drop').disabled = !on;
  $('stop').disabled = !on || !canCancel;
  $('start').disabled = on;
}

// ---------------------------------------------------------------- the stream

let current = null; // { streamId, readToken, cancelToken?, handle }

function follow(session) {
  const { streamId, readToken, cancelToken } = session;
  $('stream-id').textContent = streamId;
  $('open-tab').disabled = false;
  setStatus('connecting');
  setStreaming(true, { canCancel: Boolean(cancelToken) });
  const handle = followStream({
    streamId,
    token: readToken,
    prefix: PREFIX,
    onText: () => {
      render(handle);
      setStatus(handle.status);
    },
    onDurable: () => render(handle),
    onEnd: ({ status, error, text }) => {
      render(handle);
      setStatus(status, error);
      setStreaming(false, { canCancel: false });
      readBack(streamId, readToken, text);
    },
    onError: (err) => {
      setStatus('disconnected');
      setStreaming(false, { canCancel: false });
      showError(err);
    },
  });
  current = { ...session, handle };
}

async function readBack(streamId, readToken, liveText) {
  try {
    const { text, seq, status } = await api('GET', `${streamPath(streamId, 'text')}?token=${encodeURIComponent(readToken)}`);
    const same = text === liveText;
    $('readback-text').textContent = text;
    $('readback-meta').textContent = `status ${status}, seq ${seq} (${text.length} UTF-16 units)`;
    const match = $('readback-match');
    match.textContent = same ? 'match' : 'mismatch';
    match.dataset.match = String(same);
    match.title = same ? 'identical to the live text' : 'differs from the live text';
    $('readback').hidden = false;
  } catch (err) {
    showError(err);
  }
}

async function start(event) {
  event.preventDefault();
  current?.handle.close();
  current = null;
  resetView();
  setStreaming(true, { canCancel: false });
  let session = null;
  try {
    session = await api('POST', '/dev/session', { body: {} });
    const format = $('format').value;
    const upstream = UPSTREAMS[format];
    // The mock's text is mockText({ seed, tokens }): show exactly what was asked for, so the
    // text on screen can be checked against it (the test suite reads #upstream's data-*).
    const query = new URLSearchParams({
      tokens: $('tokens').value || '200',
      rate: $('rate').value || '40',
      seed: $('seed').value || '1',
    });
    if ($('fail').value) query.set('fail', $('fail').value);
    showUpstream(format, query);
    await api('POST', streamPath(session.streamId, 'open'), { token: session.writeToken });
    // Follow before pumping: nothing would be missed either way (a join replays), but this way the
    // reader is attached from the first token.
    follow(session);
    await api('POST', streamPath(session.streamId, 'pump'), {
      token: session.writeToken,
      body: {
        format,
        url: `${session.mockUrl.replace(/\/+$/, '')}${upstream.path}?${query}`,
        headers: upstream.headers,
        body: upstream.body,
      },
    });
  } catch (err) {
    if (!session && err.status === 404) err.message += ' (the dev endpoints need DEV_MODE = "1")';
    showError(err);
    if (!current) return setStreaming(false, { canCancel: false });
    // Open, but nothing will feed it: end it as an error rather than leave readers waiting.
    const failed = { error: `pump refused: ${err.message}` };
    await api('POST', streamPath(session.streamId, 'fail'), { token: session.writeToken, body: failed }).catch(showError);
  }
}

async function stop() {
  if (!current?.cancelToken) return;
  $('stop').disabled = true;
  try {
    await api('POST', streamPath(current.streamId, 'cancel'), { token: current.cancelToken });
  } catch (err) {
    showError(err);
    $('stop').disabled = false;
  }
}

function openReaderTab() {
  if (!current) return;
  const q = new URLSearchParams({ join: current.streamId, token: current.readToken });
  window.open(`/?${q}`, '_blank', 'noopener');
}

// ---------------------------------------------------------------- wiring

$('start-form').addEventListener('submit', start);
$('drop').addEventListener('click', () => current?.handle.drop());
$('stop').addEventListener('click', stop);
$('open-tab').addEventListener('click', openReaderTab);

const params = new URLSearchParams(location.search);
if (params.has('join')) {
  // A reader only: no write or cancel token here, so no producer controls.
  $('producer').hidden = true;
  $('role').hidden = false;
  $('stop').hidden = true;
  follow({ streamId: params.get('join'), readToken: params.get('token') ?? '' });
}
