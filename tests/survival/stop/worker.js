// The Stop test's producer Worker (tests/survival/stop.test.mjs): produce.js through a service
// binding to rindle-streams (RINDLE), the way an app's Worker calls it. It runs in a `wrangler
// dev` of its own joined to rindle's by a dev registry, so rindle's runtime is killed alone
// while this Worker, like a deployed app's, keeps running. Driven by the test over HTTP:
//   POST /produce {streamId, token, modelUrl, holdUrl, reportUrl, armed}   starts an answer
//        (`armed`: holds armed before its first request); every event produce.js reports is
//        POSTed to reportUrl as JSON (with its streamId)
//   POST /arm {streamId, action, nth}                               holds that request (gates)
//   POST /reach                                                     {reached}: rindle answers
//        through the binding (the dev registry found it again after a restart)
import { gates, produce } from './produce.js';

const producing = new Map(); // streamId → its gates, while it produces

export default {
  async fetch(request, env, ctx) {
    const path = new URL(request.url).pathname;
    if (request.method !== 'POST') return Response.json({ error: 'method_not_allowed' }, { status: 405 });
    const body = await request.json();
    if (path === '/produce') {
      const { streamId, token, modelUrl, holdUrl, reportUrl, armed = [] } = body;
      const gate = gates(holdUrl, streamId);
      for (const [action, nth] of armed) gate.arm(action, nth);
      producing.set(streamId, gate);
      // Reports leave in order, and the answer's work (waitUntil) lasts until the last has
      // arrived: the runtime cancels a subrequest still in flight when that work ends, so the
      // final report (`ended`), sent as produce() returns, would otherwise be lost.
      let reported = Promise.resolve();
      const report = (event) => {
        const body = JSON.stringify({ streamId, ...event });
        reported = reported.then(() =>
          fetch(reportUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
            .then((res) => res.arrayBuffer())
            .catch((err) => console.error(`report_failed ${streamId} ${err?.message}`)),
        );
      };
      const send = (req) => env.RINDLE.fetch(req);
      ctx.waitUntil(
        produce({ where: { service: true }, send, streamId, token, modelUrl, gate, report })
          .then(() => reported)
          .finally(() => producing.delete(streamId)),
      );
      return Response.json({ started: true });
    }
    if (path === '/reach') {
      // One request through the binding: false while the dev registry has not found rindle.
      const res = await env.RINDLE.fetch(new Request('https://rindle.internal/streams/reach-probe/text'));
      const text = await res.text();
      return Response.json({ reached: !(res.status === 503 && /not found/.test(text)), status: res.status });
    }
    if (path === '/arm') {
      const gate = producing.get(body.streamId);
      gate?.arm(body.action, body.nth);
      return Response.json({ armed: Boolean(gate) }, { status: gate ? 200 : 404 });
    }
    return Response.json({ error: 'not_found' }, { status: 404 });
  },
};
