// The producer of the Stop test (tests/survival/stop.test.mjs, bench/stop.mjs), written as an
// app writes one: open a stream with public/producer.js, call the model with the stream's
// `signal` (so a reader's cancel stops it), and pipe the model's text. The model is the mock
// model server (mock/model-server.mjs, its OpenAI Chat Completions API). It runs in the test's
// own process (over HTTP, through `wrangler dev`'s URL) and in a Worker through a service
// binding (worker.js, the way users call rindle), and tells the test what happens through
// `report(event)`. `gate` lets the test hold one request before it leaves, so a state of the
// answer (a streaming append refused by a rebuilt object, a resume not made yet) is one the
// test waits for, not a moment on a clock.
import { openStream } from '../../../public/producer.js';

/**
 * The holds a test arms on one producer's requests: `arm(action, nth)` holds the `nth` request
 * of `action` (`append`, `resume`, …) from now at `holdUrl` (util.mjs's startHold), under the key
 * `${streamId}-${action}-${n}` (`n` counting that action's requests since the open).
 */
export function gates(holdUrl, streamId) {
  const counts = new Map();
  const armed = new Map();
  return {
    arm(action, nth = 1) {
      armed.set(action, (counts.get(action) ?? 0) + nth);
    },
    /** Counts `request`, waits at the hold if it is the armed one, and returns its action. */
    async pass(request) {
      const action = new URL(request.url).pathname.split('/').at(-1);
      const n = (counts.get(action) ?? 0) + 1;
      counts.set(action, n);
      if (armed.get(action) === n) {
        armed.delete(action);
        await fetch(`${holdUrl}/${streamId}-${action}-${n}`).then((res) => res.arrayBuffer());
      }
      return action;
    },
  };
}

/** The model's text deltas: the mock's Chat Completions SSE, requested at the first read with `signal`. */
function modelText(modelUrl, signal) {
  const decoder = new TextDecoder();
  let body;
  let buffer = '';
  return new ReadableStream({
    async pull(controller) {
      body ??= (
        await fetch(modelUrl, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'mock', stream: true, messages: [{ role: 'user', content: 'Tell me a story.' }] }),
          signal,
        })
      ).body.getReader();
      for (;;) {
        const end = buffer.indexOf('\n\n');
        if (end >= 0) {
          const data = buffer.slice(0, end).split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
          buffer = buffer.slice(end + 2);
          if (data === '[DONE]') return controller.close();
          const delta = data ? JSON.parse(data).choices?.[0]?.delta?.content : undefined;
          if (delta) return controller.enqueue(delta);
          continue;
        }
        const { done, value } = await body.read();
        if (done) return controller.close();
        buffer += decoder.decode(value, { stream: true });
      }
    },
    cancel: (reason) => body?.cancel(reason),
  });
}

/**
 * Opens `streamId` (`where`: `{ baseUrl }` or `{ service }`; every request passes `gate` first,
 * then `send`) and pipes the model's answer. Reports `opened`, `request` (each request, as it
 * leaves), `resumed`, `signal` (when `stream.signal` fired: `at`, ms since the epoch), `ended`
 * (pipe's status) or `failed`.
 */
export async function produce({ where, send, streamId, token, modelUrl, gate, report }) {
  const leave = async (request) => {
    const action = await gate.pass(request);
    report({ type: 'request', action, at: Date.now() });
    return send(request).then(
      async (res) => {
        const event = { type: 'answer', action, status: res.status, at: Date.now() };
        if (res.status >= 500) event.body = (await res.clone().text()).slice(0, 300);
        report(event);
        return res;
      },
      (err) => {
        report({ type: 'answer', action, error: String(err?.message ?? err), at: Date.now() });
        throw err;
      },
    );
  };
  const api = where.service ? { service: { fetch: leave } } : { baseUrl: where.baseUrl, fetch: leave };
  try {
    const stream = await openStream({
      ...api,
      streamId,
      token,
      resume: { timeoutMs: 90_000 },
      onResume: ({ cause, seq, resent }) => report({ type: 'resumed', at: Date.now(), cause, seq, resent }),
    });
    stream.signal.addEventListener('abort', () => report({ type: 'signal', at: Date.now() }), { once: true });
    report({ type: 'opened', at: Date.now() });
    const ended = await stream.pipe(modelText(modelUrl, stream.signal));
    report({ type: 'ended', at: Date.now(), status: ended.status, cancelled: stream.cancelled });
  } catch (err) {
    report({ type: 'failed', at: Date.now(), error: `${err?.name}: ${err?.message}` });
  }
}
