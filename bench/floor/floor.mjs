// The floor of the benchmark: the least a Durable Object can do to fan a producer's text out
// to readers as SSE. One object per stream id; a streaming POST .../append forwards each
// piece of its body, as it arrives, as one `data:` frame to every reader; GET .../events
// attaches a reader; POST .../close ends every reader. No JSON, no checkpoints, no storage,
// no auth, no bounds: whatever rindle-streams does on top of this is its cost. (The variants
// below add storage or checkpoints back, each to isolate one cost.)
//
// With FLOOR_LEASE=1 (the "storage-doing" floor of the memory figure) a stream's first request
// also does what rindle-streams' lease does, and nothing more: it stores the stream's id in
// the object's own storage and sets an alarm one lease ahead, renewed while readers remain.
// That separates what the runtime charges for an object that touches its storage from what
// the project keeps. With FLOOR_D1=1 as well, that first request also runs one D1 query (a
// SELECT of the stream id): what talking to D1 at all costs an object.
//
// With FLOOR_CHECKPOINTS=1 the floor also checkpoints what it forwards into D1 on
// rindle-streams' schedule and with its statements (SPEC §5–§6): a round is due 512 characters
// behind or 750 ms after the first change not yet in one, one round at a time, each ONE batch
// of the guarded chunk insert, the length compare-and-swap and the read-back. No retries, no
// seal, no `durable` frames: what the rounds themselves cost a floor that keeps its text
// durable, with local D1 running in the Worker's own process (BENCHMARKS.md, "Where the time
// goes": the 1-reader streaming p99). FLOOR_CHECKPOINT_CHARS moves the 512 (as rindle-streams'
// CHECKPOINT_CHARS does), so that rounds can be made frequent enough to measure one's cost;
// GET .../stats answers how many rounds the stream has run.
//
// FLOOR_BODY chooses how a reader's body is written (an experiment on the runtime's streams,
// bench/compare.mjs --var FLOOR_BODY=…): `transform` (the default, the floor of record: a
// JavaScript TransformStream's writer), `enqueue` (a ReadableStream whose controller is
// enqueued into, as rindle-streams' readers are) or `identity` (workerd's native
// IdentityTransformStream's writer).
const encoder = new TextEncoder();
const LEASE_MS = 10_000;
const CHECKPOINT_CHARS = 512;
const CHECKPOINT_INTERVAL_MS = 750;
const CHECKPOINT_DDL = [
  'CREATE TABLE IF NOT EXISTS floor_message (id TEXT PRIMARY KEY, seq INTEGER NOT NULL)',
  'CREATE TABLE IF NOT EXISTS floor_chunks (id TEXT PRIMARY KEY, stream_id TEXT NOT NULL, seq INTEGER NOT NULL, text TEXT NOT NULL)',
  'CREATE INDEX IF NOT EXISTS floor_chunks_stream_seq ON floor_chunks (stream_id, seq)',
];

/** One stream's checkpoints into D1 (FLOOR_CHECKPOINTS=1): the text forwarded, and how much of it a round confirmed. */
class FloorCheckpoints {
  constructor(db, streamId, chars) {
    this.db = db;
    this.chars = chars;
    this.streamId = streamId;
    this.text = '';
    this.durableSeq = 0;
    this.rounds = 0;
    this.round = null;
    this.tick = null;
    this.forced = false;
    // The tables, and the stream's row at length 0 (the guarded insert needs it).
    const row = db.prepare('INSERT INTO floor_message (id, seq) VALUES (?1, 0) ON CONFLICT DO NOTHING').bind(streamId);
    this.ready = db.batch([...CHECKPOINT_DDL.map((sql) => db.prepare(sql)), row]);
  }

  push(text) {
    this.text += text;
    this.drive();
  }

  /** Starts a round when one is due, else arms the interval tick from the oldest change not in one. */
  drive() {
    const behind = this.text.length - this.durableSeq;
    if (this.round || behind === 0) return;
    if (this.forced || behind >= this.chars) {
      this.forced = false;
      clearTimeout(this.tick);
      this.tick = null;
      this.round = this.commit()
        .catch((e) => console.error('floor checkpoint failed', e))
        .finally(() => {
          this.round = null;
          this.drive();
        });
      return;
    }
    this.tick ??= setTimeout(() => {
      this.tick = null;
      this.forced = true;
      this.drive();
    }, CHECKPOINT_INTERVAL_MS);
  }

  async commit() {
    await this.ready;
    const [from, to, id] = [this.durableSeq, this.text.length, this.streamId];
    const [, , read] = await this.db.batch([
      this.db
        .prepare('INSERT INTO floor_chunks (id, stream_id, seq, text) SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM floor_message WHERE id = ?2 AND seq = ?5) ON CONFLICT DO NOTHING')
        .bind(`${id}:${to}`, id, to, this.text.slice(from, to), from),
      this.db.prepare('UPDATE floor_message SET seq = ?1 WHERE id = ?2 AND seq = ?3').bind(to, id, from),
      this.db.prepare('SELECT seq FROM floor_message WHERE id = ?1').bind(id),
    ]);
    this.durableSeq = read.results[0].seq;
    this.rounds++;
  }
}

export class FloorStream {
  constructor(state, env) {
    this.state = state;
    this.lease = env.FLOOR_LEASE === '1';
    this.d1 = env.FLOOR_D1 === '1' ? env.DB : null;
    this.leased = false;
    this.readers = new Set();
    this.body = env.FLOOR_BODY ?? 'transform';
    this.checkpointDb = env.FLOOR_CHECKPOINTS === '1' ? env.DB : null;
    this.checkpointChars = Number(env.FLOOR_CHECKPOINT_CHARS ?? CHECKPOINT_CHARS);
    this.checkpoints = null;
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
      if (this.checkpointDb) this.checkpoints ??= new FloorCheckpoints(this.checkpointDb, pathname.split('/')[2], this.checkpointChars);
      for await (const bytes of request.body) {
        const text = decoder.decode(bytes, { stream: true });
        if (!text) continue;
        units += text.length;
        this.send(encoder.encode(`data: ${text}\n\n`));
        this.checkpoints?.push(text);
      }
      const ck = this.checkpoints;
      return Response.json(ck ? { seq: units, durableSeq: ck.durableSeq, checkpoints: ck.rounds } : { seq: units });
    }
    if (action === 'stats') return Response.json({ checkpoints: this.checkpoints?.rounds ?? 0 });
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
