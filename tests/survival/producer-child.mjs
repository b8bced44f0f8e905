// The producer of tests/survival/: producer.js's openStream + pipe in a Node process of its own,
// so killing rindle's runtime never touches it (as a deploy never touches the producer Worker).
// It is paced by its parent, not by a clock: piece n of the source is read only once the
// parent released it (`{ type: 'release', upTo }`), so every kill point is an event the parent
// chose; `{ type: 'hold-resumes' }` keeps its resumes from leaving until `{ type: 'unhold' }`.
// It reports each read, each request it sends, each resume and the end over IPC.
import { openStream } from '../../public/producer.js';

const send = (message) => process.send(message);
let released = 0;
let wake;
let holdResumes = null; // while set, a resume waits for `unhold` before it leaves
process.on('message', (message) => {
  if (message.type === 'release') {
    released = Math.max(released, message.upTo);
    wake?.();
  } else if (message.type === 'hold-resumes') {
    let resolve;
    holdResumes = { promise: new Promise((r) => (resolve = r)), resolve };
  } else if (message.type === 'unhold') {
    holdResumes?.resolve();
    holdResumes = null;
  } else if (message.type === 'go') run(message).catch((err) => send({ type: 'failed', error: `${err.name}: ${err.message}`, code: err.code }));
});

async function run({ baseUrl, streamId, token, format, pieces, resume, watch }) {
  let reads = 0;
  const source = new ReadableStream({
    async pull(controller) {
      while (reads >= released && reads < pieces.length) await new Promise((resolve) => (wake = resolve));
      if (reads === pieces.length) return controller.close();
      controller.enqueue(pieces[reads++]);
      send({ type: 'read', reads });
    },
  });
  // Tell the parent when a request leaves (the `during open` kill waits for it).
  const tracing = async (request) => {
    const action = new URL(request.url).pathname.split('/').at(-1);
    if (action === 'resume' && holdResumes) await holdResumes.promise;
    send({ type: 'request', action });
    return fetch(request);
  };
  const stream = await openStream({
    baseUrl,
    fetch: tracing,
    streamId,
    token,
    format,
    resume,
    watch,
    onResume: ({ cause, error, seq, durableSeq, epoch, resent, attempt }) => send({ type: 'resumed', cause, message: error?.message, seq, durableSeq, epoch, resent, attempt }),
  });
  send({ type: 'opened', opened: stream.opened });
  const ended = await stream.pipe(source);
  send({ type: 'ended', ended, reads, cancelled: stream.signal.aborted });
}
