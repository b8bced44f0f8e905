// The floor of the benchmark: the least a Durable Object can do to fan a producer's text out
// to readers as SSE. One object per stream id; a streaming POST .../append forwards each
// piece of its body, as it arrives, as one `data:` frame to every reader; GET .../events
// attaches a reader; POST .../close ends every reader. No JSON, no checkpoints, no storage,
// no auth, no bounds: whatever rindle-streams does on top of this is its cost.
//
// With FLOOR_LEASE=1 (the "storage-doing" floor of the memory figure) a stream's first request
// also does what rindle-streams' lease does, and nothing more: it stores the stream's id in
// the object's own storage and sets an alarm one lease ahead, renewed while readers remain.
// That separates what the runtime charges for an object that touches its storage from what
// the project keeps. With FLOOR_D1=1 as well, that first request also runs one D1 query (a
// SELECT of the stream id): what talking to D1 at all costs an object.
//
// FLOOR_BODY chooses how a reader's body is written (an experiment on the runtime's streams,
// bench/compare.mjs --var FLOOR_BODY=…): `transform` (the default, the floor of record: a
// JavaScript TransformStream's writer), `enqueue` (a ReadableStream whose controller is
// enqueued into, as rindle-streams' readers are) or `identity` (workerd's native
// IdentityTransformStream's writer).
const encoder = new TextEncoder();
const LEASE_MS = 10_000;

export class FloorStream {
  constructor(state, env) {
    this.state = state;
    this.lease = env.FLOOR_LEASE === '1';
    this.d1 = env.FLOOR_D1 === '1' ? env.DB : null;
    this.leased = false;
    this.readers = new Set();
    this.body = env.FLOOR_BODY ?? 'transform';
  }

  /** A reader's body and the writer that writes it: `write(bytes)`, `close()`. */
  openBody() {
    if (this.body === 'enqueue') {
      let controller;
      const writer = {
        write: (bytes) => {
          try {
            controller.enqueue(bytes);
          } catch {
            this.readers.delete(writer); // the client went away
          }
        },
        close: () => {
          try {
            controller.close();
          } catch {
            // the client went away: nothing to close
          }
        },
      };
      const readable = new ReadableStream({ start: (c) => { controller = c; }, cancel: () => this.readers.delete(writer) });
      return { readable, writer };
    }
    const { readable, writable } = this.body === 'identity' ? new IdentityTransformStream() : new TransformStream();
    const streamWriter = writable.getWriter();
    streamWriter.closed.catch(() => this.readers.delete(streamWriter));
    return { readable, writer: streamWriter };
  }

  async alarm() {
    if (this.readers.size > 0) await this.state.storage.setAlarm(Date.now() + LEASE_MS);
  }

  async fetch(request) {
    const { pathname } = new URL(request.url);
    const action = pathname.split('/').pop();
    if (this.lease && !this.leased) {
      this.leased = true;
      await this.state.storage.put('streamId', pathname.split('/')[2]);
      await this.state.storage.setAlarm(Date.now() + LEASE_MS);
      if (this.d1) await this.d1.prepare('SELECT ? AS id').bind(pathname.split('/')[2]).first();
    }
    if (action === 'events') {
      const { readable, writer } = this.openBody();
      this.readers.add(writer);
      return new Response(readable, { headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' } });
    }
    if (action === 'append') {
      const decoder = new TextDecoder();
      let units = 0;
      for await (const bytes of request.body) {
        const text = decoder.decode(bytes, { stream: true });
        if (!text) continue;
        units += text.length;
        this.send(encoder.encode(`data: ${text}\n\n`));
      }
      return Response.json({ seq: units });
    }
    if (action === 'close') {
      this.send(encoder.encode('event: end\ndata: end\n\n'));
      for (const writer of this.readers) Promise.resolve(writer.close()).catch(() => {});
      this.readers.clear();
      return Response.json({ closed: true });
    }
    return new Response('not found', { status: 404 });
  }

  send(bytes) {
    for (const writer of this.readers) {
      const written = writer.write(bytes);
      if (written) written.catch(() => this.readers.delete(writer));
    }
  }
}

export default {
  fetch(request, env) {
    const [, streams, id] = new URL(request.url).pathname.split('/');
    if (streams !== 'streams' || !id) return new Response('not found', { status: 404 });
    return env.FLOOR.get(env.FLOOR.idFromName(id)).fetch(request);
  },
};
