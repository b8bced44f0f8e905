// Units of producer.js's resume layer (SPEC §10, issue 35 item 6), without a server: the
// backoff's bounds, KeptText's slicing in UTF-16 code units (emoji, ZWJ sequences, skin tones,
// CJK; never inside a surrogate pair), which failures mean "resume and re-send", and the send
// layer against a fake stream API (a mock for the faults only: it loses connections and resets
// the way the runtime does; tests/survival/ runs the real runtime with real kills).
import test from 'node:test';
import assert from 'node:assert/strict';
import {
  backoffDelay, ConnectionLostError, KeptText, openStream, RESUME_DEFAULTS, ResumeGapError, resumeCause, RindleError,
} from '../../public/producer.js';

test('backoff: 100 ms doubling to 2 s, jittered between half and all of it', () => {
  assert.deepEqual(RESUME_DEFAULTS, { timeoutMs: 60_000, baseDelayMs: 100, maxDelayMs: 2_000 });
  const low = () => 0;
  const high = () => 1 - Number.EPSILON;
  assert.equal(backoffDelay(0, RESUME_DEFAULTS, low), 50);
  assert.ok(backoffDelay(0, RESUME_DEFAULTS, high) <= 100);
  assert.equal(backoffDelay(3, RESUME_DEFAULTS, low), 400);
  for (const attempt of [5, 6, 20, 1000]) {
    assert.equal(backoffDelay(attempt, RESUME_DEFAULTS, low), 1000, `attempt ${attempt} capped`);
    assert.ok(backoffDelay(attempt, RESUME_DEFAULTS, high) <= 2000);
  }
  // At least 60 s of attempts before giving up: the sum of the smallest waits until the cap
  // plus capped ones; the loop itself is bounded by timeoutMs, not by a count.
  assert.equal(backoffDelay(2, { baseDelayMs: 10, maxDelayMs: 25 }, low), 12.5, 'options apply');
  const delays = Array.from({ length: 40 }, (_, i) => backoffDelay(i, RESUME_DEFAULTS));
  assert.ok(delays.every((d, i) => d >= Math.min(2000, 100 * 2 ** i) / 2 && d <= Math.min(2000, 100 * 2 ** i)));
});

test('KeptText: slices by UTF-16 offset from the last durableSeq, never inside a surrogate pair', () => {
  const kept = new KeptText(10);
  const pieces = ['你好', '👍🏽', 'a👨‍👩‍👧‍👦b', '🇫🇷'];
  for (const p of pieces) kept.push(p);
  const all = pieces.join('');
  assert.equal(kept.end, 10 + all.length);
  assert.equal(kept.from(10), all);
  assert.equal(kept.from(12), all.slice(2), 'after the CJK');
  assert.equal(kept.from(14), all.slice(4), 'between 👍 and its skin tone: two code points, a valid cut');
  assert.equal(kept.from(kept.end), '');
  // Inside 👍 (a surrogate pair), inside the family's first person, inside a flag's letter.
  for (const inside of [13, 10 + 2 + 4 + 1 + 1, kept.end - 1]) {
    assert.throws(() => kept.from(inside), (e) => e instanceof ResumeGapError && /surrogate pair/.test(e.message) && e.seq === inside, `seq ${inside}`);
  }
  // A ZWJ sequence can be cut between its code points (the server's seq is UTF-16, not graphemes).
  const zwj = 10 + 2 + 4 + 1 + 2; // right after 👨, before the ZWJ
  assert.equal(kept.from(zwj), all.slice(zwj - 10));
  assert.throws(() => kept.from(9), ResumeGapError, 'below what is kept');
  assert.throws(() => kept.from(kept.end + 1), ResumeGapError, 'past what was sent');
  assert.throws(() => kept.from(11.5), ResumeGapError, 'not an offset');

  kept.forget(14);
  assert.equal(kept.start, 14);
  assert.equal(kept.from(14), all.slice(4));
  assert.throws(() => kept.from(12), ResumeGapError, 'forgotten: committed');
  kept.forget(12);
  assert.equal(kept.start, 14, 'durableSeq never moves it back');
  kept.forget(kept.end + 50);
  assert.equal(kept.start, kept.end, 'forgetting past the end keeps nothing, and stays at the end');
  assert.equal(kept.text, '');
});

test('resumeCause: lost connections, reset objects, not_open and resume_required resume; refusals do not', () => {
  const api = (status, code, message = '') => new RindleError(status, code, message);
  const cases = [
    [new ConnectionLostError('append', new TypeError('fetch failed')), 'connection'],
    [api(503, 'unavailable', 'the service could not complete the request: Error: Durable Object reset because its code was updated.'), 'reset'],
    [api(500, 'http_error', 'Internal Server Error'), 'reset'],
    [api(502, 'http_error', 'Bad Gateway'), 'reset'],
    [api(500, 'internal', 'Error: Durable Object storage operation exceeded timeout which caused object to be reset. ... is no longer active'), 'reset'],
    [api(404, 'not_open', 'no stream is open here'), 'not_open'],
    [api(409, 'resume_required', 'the stream was rehydrated'), 'resume_required'],
    [api(409, 'superseded', 'another producer resumed'), null],
    [api(409, 'closed', 'sealed'), null],
    [api(400, 'bad_epoch', 'x'), null],
    [api(400, 'bad_chunk', 'x'), null],
    [api(503, 'checkpoint_failed', 'D1 refused the checkpoint'), null],
    [api(403, 'forbidden', 'x'), null],
    [new TypeError('a text stream takes strings'), null],
    [new Error('fetch failed'), null],
  ];
  for (const [err, cause] of cases) assert.equal(resumeCause(err), cause, `${err.name}: ${err.message}`);
});

/**
 * A fake stream API for the send layer's faults: it keeps `text`, an `epoch`, and fails the
 * requests `faults` names (by order of arrival), the way a reset runtime does. Streaming bodies
 * are read piece by piece; a `cut` fault takes `keep` characters of the body and drops the rest
 * with the connection.
 */
function fakeApi({ faults = {}, onRequest = () => {}, watch = true } = {}) {
  const server = { text: '', durable: 0, epoch: 1, resumes: 0, requests: [], watches: 0, held: 0, cancelled: false };
  // The producer's watch (GET /watch) is held until the stream is sealed, as the object holds it
  // until a cancel or the end. It is not numbered with the writes: `faults` name writes.
  let sealed = null;
  const watchers = new Set();
  Object.defineProperty(server, 'sealed', {
    get: () => sealed,
    set: (value) => {
      sealed = value;
      for (const wake of [...watchers]) wake();
    },
  });
  const reply = (status, body) => new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
  /** A reader's cancel of the live stream: it stays live until the producer closes it. */
  server.cancel = () => {
    server.cancelled = true;
    for (const wake of [...watchers]) wake();
  };
  const watched = async (request) => {
    const n = (server.watches += 1);
    if (!watch) return reply(404, { error: 'not_found', message: 'no route for /streams/s/watch' }); // a server without it
    if (typeof watch === 'function' && watch(n) === 'down') throw new TypeError('fetch failed');
    if (!sealed && !server.cancelled) {
      server.held += 1;
      await new Promise((resolve, reject) => {
        const wake = () => {
          watchers.delete(wake);
          resolve();
        };
        watchers.add(wake);
        request.signal.addEventListener('abort', () => {
          watchers.delete(wake);
          reject(request.signal.reason);
        }, { once: true });
      }).finally(() => (server.held -= 1));
    }
    const status = sealed?.status ?? 'streaming';
    return reply(200, { status, cancelled: server.cancelled || status === 'cancelled', seq: server.text.length, durableSeq: server.durable });
  };
  server.fetch = async (request) => {
    const action = new URL(request.url).pathname.split('/').at(-1);
    if (action === 'watch') return watched(request);
    const n = server.requests.push({ action, epoch: request.headers.get('x-rindle-epoch') });
    onRequest(action, server, n);
    const fault = faults[n];
    if (action === 'open') {
      if (fault === 'down') throw new TypeError('fetch failed'); // never reached the object
      if (server.opened) return reply(409, { error: 'open_refused', message: 'already streaming' });
      server.opened = true;
      server.opener = server.holder = request.headers.get('x-rindle-producer'); // the producer epoch 1 is granted to
      if (fault === 'lost') throw new TypeError('fetch failed'); // took, but the answer was lost
      return reply(200, { streamId: 's', seq: 0, durableSeq: 0, epoch: 1 });
    }
    if (action === 'resume') {
      if (!server.opened) return reply(404, { error: 'not_open', message: 'no stream is open here' });
      if (fault === 'down') throw new TypeError('fetch failed');
      if (server.sealed) return reply(409, { error: 'closed', message: 'sealed', ...server.sealed });
      // The fence, as the object keeps it: an older epoch is superseded, whatever the state.
      const asked = request.headers.get('x-rindle-epoch');
      server.resumers = [...(server.resumers ?? []), { epoch: asked, producer: request.headers.get('x-rindle-producer') }];
      if (asked !== null && Number(asked) < server.epoch) return reply(409, { error: 'superseded', message: 'old epoch', epoch: server.epoch });
      // No epoch: a caller whose open's answer was lost, which wrote nothing. It is granted only
      // what loses nothing: a stream held for its id, or one nothing was written to.
      const producer = request.headers.get('x-rindle-producer');
      if (asked === null && server.text.length > 0 && producer !== server.holder) return reply(409, { error: 'superseded', message: 'not yours', epoch: server.epoch });
      server.holder = producer;
      server.epoch += 1;
      server.resumes += 1;
      return reply(200, { seq: server.text.length, durableSeq: server.durable, format: 'text', epoch: server.epoch });
    }
    if (Number(request.headers.get('x-rindle-epoch')) !== server.epoch) return reply(409, { error: 'superseded', message: 'old epoch' });
    if (server.sealed && action === 'append') {
      // Like the real object, a refused streaming append is answered only once its body ended
      // (it reads and discards what it did not take: answering earlier breaks the connection).
      if (request.body) await readBody(request.body);
      return reply(409, { error: 'closed', message: `stream s is ${server.sealed.status}`, ...server.sealed });
    }
    if (server.sealed) return reply(200, server.sealed); // close/fail after a cancel: it says so
    if (fault === 'resetReading') {
      // As a reset under `wrangler dev`: answered at once, while the connection still takes
      // whatever the body sends (kept in `server.orphaned`: it reaches no object).
      const orphan = { text: '' };
      server.orphaned = orphan;
      orphan.done = readBody(request.body, { onPiece: (text) => (orphan.text = text) }).catch(() => {});
      server.text = server.text.slice(0, server.durable);
      return reply(503, { error: 'unavailable', message: 'Durable Object reset because its code was updated.' });
    }
    if (fault === 'reset') {
      // The object died under the request: its uncommitted tail is gone, the new instance rehydrates.
      server.text = server.text.slice(0, server.durable);
      return reply(503, { error: 'unavailable', message: 'Durable Object reset because its code was updated.' });
    }
    if (action === 'append' && fault === 'refuseStreaming') {
      // Refused up front (say, resume_required), and like the real object answered only once
      // its body ended: the body waits on the model.
      if (request.body) await readBody(request.body);
      return reply(409, { error: 'resume_required', message: 'rehydrated', seq: server.text.length, durableSeq: server.durable });
    }
    if (action === 'append') {
      const body = request.body ? await readBody(request.body, fault) : '';
      server.text += body.text;
      if (body.cut) {
        server.text = server.text.slice(0, Math.max(server.durable, server.text.length - 1)); // and a piece lost with it
        throw new TypeError('fetch failed', { cause: { code: 'ECONNRESET' } });
      }
      return reply(200, { seq: server.text.length, durableSeq: server.durable, cancelled: server.cancelled });
    }
    if (action === 'flush') {
      server.durable = server.text.length;
      return reply(200, { seq: server.text.length, durableSeq: server.durable });
    }
    server.sealed = { status: action === 'close' ? 'complete' : 'error', seq: server.text.length, durableSeq: server.text.length };
    return reply(200, server.sealed);
  };
  return server;
}

async function readBody(body, fault) {
  const decoder = new TextDecoder();
  let text = '';
  const reader = body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return { text };
    text += decoder.decode(value, { stream: true });
    fault?.onPiece?.(text);
    if (fault?.cut !== undefined && text.length >= fault.cut) {
      reader.cancel().catch(() => {});
      return { text, cut: true };
    }
  }
}

const FAST = { timeoutMs: 2_000, baseDelayMs: 1, maxDelayMs: 5 };
const open = (server, options = {}) => openStream({ baseUrl: 'http://fake', fetch: server.fetch, streamId: 's', token: 't', resume: FAST, ...options });

test('pipe: a connection cut mid-append and a reset resume, re-send from the server seq, and read the source once', async () => {
  const pieces = ['Hello ', '世界 ', '👍🏽 ', '👨‍👩‍👧 ', 'done.'];
  const text = pieces.join('');
  let reads = 0;
  const source = new ReadableStream({
    pull(c) {
      if (reads < pieces.length) c.enqueue(pieces[reads++]);
      else c.close();
    },
  });
  // Request 2 (the first streaming append) is cut after 9 characters; the resume's re-send of
  // what was lost (request 4, a plain append) dies with a reset; after the second resume the
  // lost text goes again as a plain append, then the source continues as a streaming one.
  const server = fakeApi({ faults: { 2: { cut: 9 }, 4: 'reset' } });
  const resumes = [];
  const stream = await open(server, { onResume: (info) => resumes.push(info) });
  assert.equal(stream.epoch, 1);
  const ended = await stream.pipe(source);
  assert.equal(ended.status, 'complete');
  assert.equal(server.text, text, 'exactly the source, once');
  assert.equal(reads, pieces.length);
  assert.deepEqual(resumes.map((r) => [r.cause, r.epoch]), [['connection', 2], ['reset', 3]]);
  assert.equal(stream.epoch, 3);
  assert.deepEqual(server.requests.map((r) => [r.action, r.epoch]), [
    ['open', null], ['append', '1'], ['resume', '1'], ['append', '2'], ['resume', '2'], ['append', '3'], ['append', '3'], ['close', '3'],
  ]);
});

test('pipe: a streaming append answered with a reset while its connection still reads sends no more: the next attempt sends the source', async () => {
  const pieces = ['one ', 'two ', 'three ', 'four ', 'five.'];
  let reads = 0;
  let released = 2; // the rest once the helper has resumed
  let wake;
  const source = new ReadableStream({
    async pull(c) {
      while (reads >= released && reads < pieces.length) await new Promise((resolve) => (wake = resolve));
      if (reads < pieces.length) c.enqueue(pieces[reads++]);
      else c.close();
    },
  });
  const onRequest = (action) => {
    if (action === 'resume') {
      released = pieces.length;
      wake?.();
    }
  };
  const server = fakeApi({ faults: { 2: 'resetReading' }, onRequest });
  const stream = await open(server);
  assert.equal((await stream.pipe(source)).status, 'complete');
  await server.orphaned.done;
  assert.equal(server.text, pieces.join(''), 'exactly the source, once');
  assert.equal(reads, pieces.length);
  assert.ok(!server.orphaned.text.includes(pieces[2]), `the failed attempt's body stopped before the source went on: it sent ${JSON.stringify(server.orphaned.text)}`);
});

test('plain appends and flush: a reset loses the uncommitted tail, the helper re-sends it from what it kept', async () => {
  const server = fakeApi({ faults: { 5: 'reset' } });
  const stream = await open(server);
  await stream.append('one 🇫🇷 ');
  await stream.flush(); // durable: the helper may forget it
  await stream.append('two 👍🏽 ');
  await stream.append('three'); // request 5: the object resets and loses "two 👍🏽 "
  assert.equal(server.text, 'one 🇫🇷 two 👍🏽 three');
  assert.equal((await stream.close()).status, 'complete');
});

test('the resume gives up after timeoutMs with the write\'s own failure; superseded stops at once; resume: false never resumes', async () => {
  const down = fakeApi({ faults: Object.fromEntries(Array.from({ length: 500 }, (_, i) => [i + 3, 'down'])) });
  down.fetch = ((inner) => async (request) => {
    const action = new URL(request.url).pathname.split('/').at(-1);
    if (action === 'append') throw new TypeError('fetch failed');
    if (action === 'resume') throw new TypeError('fetch failed');
    return inner(request);
  })(down.fetch);
  const started = Date.now();
  const stream = await open(down, { resume: { ...FAST, timeoutMs: 300 } });
  await assert.rejects(stream.append('x'), ConnectionLostError);
  const took = Date.now() - started;
  assert.ok(took >= 300 && took < 2000, `gave up after ${took} ms`);

  const server = fakeApi();
  const other = await open(server);
  server.epoch = 7; // another producer resumed it
  await assert.rejects(other.append('x'), (e) => e.code === 'superseded');
  assert.equal(server.resumes, 0);

  const noResume = fakeApi({ faults: { 2: 'reset' } });
  const plain = await open(noResume, { resume: false });
  await assert.rejects(plain.append('x'), (e) => e.code === 'unavailable');
  assert.equal(noResume.resumes, 0);
});

test('a resume carries the epoch and the producer\'s id; a producer another resume replaced is superseded at its resume and stops without failing the stream', async () => {
  // A reset loses the producer's append; by its resume another producer has resumed (epoch 2).
  const server = fakeApi({ faults: { 2: 'reset' }, onRequest: (action, s) => action === 'resume' && s.epoch === 1 && (s.epoch = 2) });
  const stream = await open(server);
  const source = new ReadableStream({ start: (c) => { c.enqueue('replaced'); c.close(); } });
  await assert.rejects(stream.pipe(source), (e) => e.code === 'superseded');
  assert.deepEqual(server.resumers.map((r) => r.epoch), ['1'], 'the resume carried the epoch it held');
  assert.match(server.resumers[0].producer, /^[0-9a-f-]{36}$/, 'and the producer\'s id');
  assert.equal(server.requests.filter((r) => r.action === 'fail').length, 0, 'the stream it no longer owns is not failed');
  assert.equal(server.sealed, null);
});

test('a cancel during the gap: the resume answers closed/cancelled, signal fires, pipe resolves cancelled', async () => {
  const server = fakeApi({ faults: { 2: { cut: 3 } }, onRequest: (action, s) => action === 'resume' && (s.sealed = { status: 'cancelled', seq: 0, durableSeq: 0 }) });
  const stream = await open(server);
  let cancelledSource;
  const source = new ReadableStream({ pull: (c) => c.enqueue('more text '), cancel: (reason) => void (cancelledSource = reason) });
  const ended = await stream.pipe(source);
  assert.equal(ended.status, 'cancelled');
  assert.equal(stream.signal.aborted, true);
  assert.equal(stream.signal.reason.name, 'AbortError');
  assert.equal(cancelledSource?.name, 'AbortError', 'the model is stopped');
});

test('a resume seq inside a surrogate pair is a server bug: ResumeGapError, nothing re-sent', async () => {
  const server = fakeApi({ faults: { 2: 'reset' } });
  const inner = server.fetch;
  server.fetch = async (request) => {
    const res = await inner(request);
    if (!request.url.endsWith('/resume')) return res;
    const body = await res.json();
    return new Response(JSON.stringify({ ...body, seq: 1 }), { status: 200 });
  };
  const stream = await open(server);
  await assert.rejects(stream.append('👍 tail'), ResumeGapError);
  assert.equal(server.requests.filter((r) => r.action === 'append').length, 1, 'no append after the bad resume');
});

test('a lost open: resumed when it took, opened again when it did not', async () => {
  const took = fakeApi({ faults: { 1: 'lost' } });
  const a = await open(took);
  assert.deepEqual([a.opened.resumed, a.epoch], [true, 2]);
  await a.append('after a lost open');
  assert.equal(took.text, 'after a lost open');
  assert.deepEqual(took.requests.map((r) => r.action), ['open', 'resume', 'append']);

  const never = fakeApi({ faults: { 1: 'down' } });
  const b = await open(never);
  assert.equal(b.epoch, 1);
  assert.deepEqual(never.requests.map((r) => r.action), ['open', 'resume', 'open']);
  await assert.rejects(open(fakeApi({ faults: { 1: 'down' } }), { resume: false }), ConnectionLostError);
});

test('a lost open names its producer: its resume is granted as the opener\'s, and another invocation of the answer is refused, never handed the stream', async () => {
  // The open took, its answer was lost: the resume is the same producer's (the open named it).
  const took = fakeApi({ faults: { 1: 'lost' } });
  const a = await open(took);
  await a.append('mine');
  assert.equal(took.text, 'mine');
  assert.ok(took.opener, 'the open named its producer (x-rindle-producer)');
  assert.deepEqual(took.resumers.map((r) => r.producer), [took.opener], 'the resume carried the id the open named');
  // A second invocation of the same answer, while the first writes: its open reaches nothing (a
  // reset), so it resumes (its open may have taken); the stream is the first one's, with text.
  const busy = fakeApi({ faults: { 3: 'down' } }); // the first's open and append, then the second's open
  const first = await open(busy);
  await first.append('the first answer');
  const retried = await open(busy, { resume: { ...FAST, timeoutMs: 2000 } }).then(() => null, (err) => err);
  assert.equal(retried?.code, 'superseded', `the retried invocation is refused: ${retried}`);
  assert.equal(busy.text, 'the first answer', 'nothing of the retried invocation was written');
  await first.append(' goes on');
  assert.equal(busy.text, 'the first answer goes on', 'the first producer keeps its stream');
});

test('a Stop the server kept across a reset: a write refused closed/cancelled fires the signal and resolves cancelled, never an error', async () => {
  const server = fakeApi({ watch: false });
  const stream = await open(server, { watch: false });
  await stream.append('abc');
  // The object was reset and rebuilt from a row carrying the Stop: sealed `cancelled` at 3.
  server.sealed = { status: 'cancelled', seq: 3, durableSeq: 3 };
  const answer = await stream.append('def');
  assert.equal(stream.signal.aborted, true, 'the signal fired');
  assert.deepEqual([answer.cancelled, answer.ended?.status], [true, 'cancelled']);
  assert.deepEqual(await stream.close(), { status: 'cancelled', seq: 3, durableSeq: 3 });
  assert.equal(server.text, 'abc', 'nothing after the Stop');
});

test('a request that cannot be built (a bad baseUrl) is the caller\'s error at once, not a lost connection to retry', async () => {
  const started = Date.now();
  await assert.rejects(openStream({ baseUrl: 'not a url', streamId: 's', token: 't' }), (e) => e instanceof TypeError && !(e instanceof ConnectionLostError));
  assert.ok(Date.now() - started < 1000, 'no resume loop');
});

test('resumes that lead nowhere (each granted, every write after it lost) end after timeoutMs, not never', async () => {
  const server = fakeApi();
  const inner = server.fetch;
  server.fetch = async (request) => (request.url.endsWith('/append') ? Promise.reject(new TypeError('fetch failed')) : inner(request));
  const stream = await open(server, { resume: { ...FAST, timeoutMs: 300 } });
  const started = Date.now();
  await assert.rejects(stream.append('x'), ConnectionLostError);
  assert.ok(Date.now() - started < 2000, `gave up after ${Date.now() - started} ms`);
  assert.ok(server.resumes >= 2, `it did resume (${server.resumes})`);
});

/** A model's stream that gives nothing until it is stopped (a model still thinking). */
function idleModel() {
  const model = { cancelled: undefined };
  model.stream = new ReadableStream({ pull: () => new Promise(() => {}), cancel: (reason) => void (model.cancelled = reason) });
  return model;
}

/** `promise`, or a failure naming `what` when it has not settled within 3 s. */
async function noHang(promise, what) {
  let timer;
  const hang = new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} hangs`)), 3_000)));
  try {
    return await Promise.race([promise, hang]);
  } finally {
    clearTimeout(timer);
  }
}

test('a cancel in the gap with nothing to re-send: pipe, append, flush and close resolve cancelled and fire signal', async () => {
  // The cancel lands while the object is gone (the resume answers 409 closed/cancelled).
  const sealedInGap = (action, s) => action === 'resume' && (s.sealed = { status: 'cancelled', seq: s.text.length, durableSeq: s.durable });
  // pipe: the model has given nothing yet when the streaming append meets the reset.
  const gap = fakeApi({ faults: { 2: 'reset' }, onRequest: sealedInGap });
  const piping = await open(gap);
  const idle = idleModel();
  const ended = await noHang(piping.pipe(idle.stream), 'pipe');
  assert.equal(ended.status, 'cancelled');
  assert.equal(piping.signal.aborted, true, 'signal fired');
  assert.equal(idle.cancelled?.name, 'AbortError', 'the model is stopped');

  // flush and close: everything sent is durable, so the helper keeps nothing to re-send.
  for (const action of ['flush', 'close']) {
    const server = fakeApi({ faults: { 4: 'reset' }, onRequest: sealedInGap });
    const stream = await open(server);
    await stream.append('all of it 😀');
    await stream.flush();
    const answer = await noHang(stream[action](), action);
    assert.equal(answer.status, 'cancelled', action);
    assert.equal(stream.signal.aborted, true, `${action}: signal fired`);
  }

  // append after a flush: the reset answers before the object took any of it.
  const server = fakeApi({ faults: { 4: 'reset' }, onRequest: sealedInGap });
  const stream = await open(server);
  await stream.append('durable ');
  await stream.flush();
  const appended = await noHang(stream.append('lost'), 'append');
  assert.deepEqual([appended.cancelled, appended.ended?.status], [true, 'cancelled']);
  assert.equal(stream.signal.aborted, true, 'append: signal fired');
});

test('a cancel right after a granted resume with nothing to re-send: pipe learns it from a plain append, not a streaming one the object answers only at its end', async () => {
  // The resume (request 3) is granted; the cancel lands before the helper's next write, which
  // the object refuses as closed. Refusing a streaming append, it first reads the body to its
  // end, and the body waits on a model that stops only when signal fires: a streaming append
  // here would wait for ever.
  const server = fakeApi({
    faults: { 2: 'reset' },
    onRequest: (action, s, n) => n === 4 && (s.sealed = { status: 'cancelled', seq: s.text.length, durableSeq: s.durable }),
  });
  const stream = await open(server);
  const idle = idleModel();
  const ended = await noHang(stream.pipe(idle.stream), 'pipe');
  assert.equal(ended.status, 'cancelled');
  assert.equal(stream.signal.aborted, true, 'signal fired');
  assert.equal(idle.cancelled?.name, 'AbortError', 'the model is stopped');
  // The refusal says `cancelled`: the stream is sealed, so nothing more is sent (no `fail`).
  assert.deepEqual(server.requests.map((r) => r.action), ['open', 'append', 'resume', 'append']);
});

test('the watch: a cancel heard while no write is in flight (before the first append, between appends) fires signal at once', async () => {
  const server = fakeApi();
  const stream = await open(server);
  await until(() => server.held === 1, 'the watch held from the open');
  server.cancel();
  await noHang(new Promise((resolve) => stream.signal.addEventListener('abort', resolve)), 'signal before any append');
  assert.equal(stream.signal.reason.name, 'AbortError');
  assert.equal((await stream.close()).status, 'complete', 'the fake seals as told; the real object seals cancelled');
  assert.equal(server.held, 0, 'no watch left once done');
  assert.deepEqual(server.requests.map((r) => r.action), ['open', 'close'], 'no write was needed to hear it');
});

test('the watch: a cancel during a streaming append nobody answers before its body ends (refused, an early answer fetch cannot read, or one whose body never ends) stops the model and pipe resolves cancelled', async () => {
  for (const fault of ['refuseStreaming', 'neverAnswered', 'answerNeverEnds']) {
    const server = fakeApi({ faults: { 2: fault } });
    if (fault === 'answerNeverEnds') {
      // As Node 22's fetch under wrangler dev: the early answer's headers arrive while the body is
      // still being sent, and once the request is aborted its body neither ends nor fails.
      const inner = server.fetch;
      server.fetch = async (request) => {
        if (!request.url.endsWith('/append') || !request.body) return inner(request);
        server.requests.push({ action: 'append', epoch: request.headers.get('x-rindle-epoch') });
        readBody(request.body).catch(() => {});
        return new Response(new ReadableStream({ start: (c) => c.enqueue(new TextEncoder().encode('{"seq":')) }), { status: 200 });
      };
    }
    if (fault === 'neverAnswered') {
      // As Node's fetch under wrangler dev: the object's early answer is never read while the body is open.
      const inner = server.fetch;
      server.fetch = async (request) => {
        if (!request.url.endsWith('/append') || !request.body) return inner(request);
        server.unanswered = true;
        await readBody(request.body);
        return inner(new Request(request.url, { method: 'POST', headers: request.headers, body: '' }));
      };
    }
    const stream = await open(server);
    const idle = idleModel();
    const piping = stream.pipe(idle.stream);
    await until(() => (server.requests.length === 2 || server.unanswered) && server.held === 1, `${fault}: the streaming append sent, the watch held`);
    server.cancel();
    const ended = await noHang(piping, `${fault}: pipe`);
    assert.equal(stream.signal.aborted, true, `${fault}: signal fired`);
    assert.equal(idle.cancelled?.name, 'AbortError', `${fault}: the model is stopped`);
    assert.equal(ended.status, 'complete', `${fault}: closed (the fake seals as told; the real object seals cancelled)`);
    assert.deepEqual(server.requests.map((r) => r.action), ['open', 'append', 'close'], `${fault}: the append's body ended, the stream closed, no resume`);
    assert.equal(server.held, 0, `${fault}: no watch left`);
  }
});

test('the watch: asked again after it fails (within half a second), and a server without it (404) changes nothing', async () => {
  const flaky = fakeApi({ watch: (n) => (n <= 3 ? 'down' : 'ok') });
  const stream = await open(flaky, { resume: { ...FAST, maxDelayMs: 2_000 } });
  await until(() => flaky.held === 1, 'the watch held after three failures');
  assert.equal(flaky.watches, 4);
  flaky.cancel();
  await noHang(new Promise((resolve) => stream.signal.addEventListener('abort', resolve)), 'signal');

  const old = fakeApi({ watch: false });
  const plain = await open(old);
  await plain.append('no watch here');
  assert.equal((await plain.close()).status, 'complete');
  assert.equal(old.text, 'no watch here');
  assert.equal(old.watches, 1, 'asked once, then left alone');

  const off = fakeApi();
  const unwatched = await open(off, { watch: false });
  await unwatched.append('x');
  await unwatched.close();
  assert.equal(off.watches, 0, 'watch: false sends none');
});

/** Polls `probe` until it is true (a fake's state, which announces itself by no event). */
async function until(probe, what) {
  for (const started = Date.now(); !probe(); await new Promise((resolve) => setTimeout(resolve, 2))) {
    if (Date.now() - started > 3_000) throw new Error(`${what}: not within 3 s`);
  }
}
