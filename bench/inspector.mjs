// A DevTools protocol session with the Worker's isolate, through the inspector port that
// `wrangler dev` exposes (tests/e2e/harness.mjs records it as `stack.inspectorPort`). Node 20
// has no WebSocket client without a flag, and a DevTools session needs only the protocol's
// basics (one text message per command, replies and events back), so this speaks them itself.
import { randomBytes } from 'node:crypto';
import http from 'node:http';

/**
 * Connects to the isolate behind `port`; resolves to { send(method, params) → result, close() }.
 * `onEvent(message)` gets the protocol's events (messages without an id).
 */
export async function connectInspector(port, { onEvent } = {}) {
  const [target] = await (await fetch(`http://127.0.0.1:${port}/json`)).json();
  const { hostname, port: wsPort, pathname } = new URL(target.webSocketDebuggerUrl);
  const socket = await new Promise((resolve, reject) => {
    const req = http.request({
      host: hostname,
      port: wsPort,
      path: pathname,
      headers: {
        connection: 'Upgrade',
        upgrade: 'websocket',
        'sec-websocket-version': '13',
        'sec-websocket-key': randomBytes(16).toString('base64'),
        // wrangler's inspector proxy admits DevTools origins only; localhost is one.
        origin: 'http://localhost',
      },
    });
    req.on('upgrade', (_res, s) => resolve(s));
    req.on('response', (res) => reject(new Error(`inspector: HTTP ${res.statusCode} instead of a WebSocket`)));
    req.on('error', reject);
    req.end();
  });
  socket.setNoDelay(true);

  let lastId = 0;
  const pending = new Map();
  const onMessage = (text) => {
    const m = JSON.parse(text);
    const settle = pending.get(m.id);
    if (!settle) return void (m.id === undefined && onEvent?.(m));
    pending.delete(m.id);
    if (m.error) settle.reject(new Error(`${m.error.message} (${JSON.stringify(m.error)})`));
    else settle.resolve(m.result);
  };
  // Frames from the server: unmasked; a message may span continuation frames.
  let buffer = Buffer.alloc(0);
  let parts = [];
  socket.on('data', (bytes) => {
    buffer = Buffer.concat([buffer, bytes]);
    for (;;) {
      if (buffer.length < 2) return;
      const fin = buffer[0] & 0x80;
      const opcode = buffer[0] & 0x0f;
      let length = buffer[1] & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (buffer.length < 4) return;
        length = buffer.readUInt16BE(2);
        offset = 4;
      } else if (length === 127) {
        if (buffer.length < 10) return;
        length = Number(buffer.readBigUInt64BE(2));
        offset = 10;
      }
      if (buffer.length < offset + length) return;
      const payload = buffer.subarray(offset, offset + length);
      buffer = buffer.subarray(offset + length);
      if (opcode === 0x1 || opcode === 0x0) {
        parts.push(payload);
        if (fin) {
          onMessage(Buffer.concat(parts).toString('utf8'));
          parts = [];
        }
      } else if (opcode === 0x8) {
        socket.end();
      }
    }
  });
  const closed = new Promise((resolve) => socket.on('close', resolve));
  socket.on('error', () => {});
  closed.then(() => {
    for (const { reject } of pending.values()) reject(new Error('inspector: the connection closed'));
    pending.clear();
  });

  /** One masked text frame (a client must mask). */
  const frame = (text) => {
    const payload = Buffer.from(text);
    const mask = randomBytes(4);
    const head =
      payload.length < 126
        ? Buffer.from([0x81, 0x80 | payload.length])
        : payload.length < 65536
          ? Buffer.from([0x81, 0x80 | 126, payload.length >> 8, payload.length & 0xff])
          : Buffer.concat([Buffer.from([0x81, 0x80 | 127]), (() => {
              const b = Buffer.alloc(8);
              b.writeBigUInt64BE(BigInt(payload.length));
              return b;
            })()]);
    for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i % 4];
    return Buffer.concat([head, mask, payload]);
  };
  const send = (method, params = {}) =>
    new Promise((resolve, reject) => {
      const id = ++lastId;
      pending.set(id, { resolve, reject });
      socket.write(frame(JSON.stringify({ id, method, params })));
    });
  const close = async () => {
    socket.end(Buffer.from([0x88, 0x80, 0, 0, 0, 0]));
    await Promise.race([closed, new Promise((r) => setTimeout(r, 1000))]);
    socket.destroy();
  };
  return { send, close };
}

/**
 * Turns off the DevTools Network domain that `wrangler dev`'s inspector proxy enables in the
 * Worker's isolate. With it on, the runtime reports every request and every body chunk
 * (one event per chunk written to every SSE reader) to the proxy, whose workerd relays each
 * event to wrangler's node process: 75–80% of the floor's measured CPU at 10 readers, more the
 * larger the requests' headers. Production has no inspector. Console output (Runtime) stays on.
 */
export async function quietInspector(port) {
  const session = await connectInspector(port);
  try {
    await session.send('Network.disable');
  } finally {
    await session.close();
  }
}
