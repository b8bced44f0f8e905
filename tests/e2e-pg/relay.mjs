// A TCP relay between wrangler's local Hyperdrive proxy and Postgres, of the tests' own (not a
// mock: it forwards bytes), for the faults a network between a Worker and its database has:
//   Postgres down  (a connect to it fails) a new connection is answered as a Postgres shutting
//                  down answers it: the startup gets a FATAL 57P03 ErrorResponse, and the socket
//                  closes only after the client closes it. wrangler 4.86's Hyperdrive proxy
//                  crashes the whole `wrangler dev` on a refused or reset connection, and on a FIN
//                  it writes after (EPIPE) (docs/TOOLCHAIN.md, "Postgres down crashes wrangler
//                  dev"); a server that stops (pg_ctl stop) is such a refusal, hence the relay.
//   blackhole()    every connection open now stops carrying bytes, either way, and stays open:
//                  a half-open socket (a middlebox or a server gone without a reset). New
//                  connections are carried as before.
// `connections` counts the connections the relay accepted.
import net from 'node:net';

const SSL_REQUEST = 80877103;

/** A relay from a free loopback port to Postgres on `port`. */
export function startRelay(port) {
  const live = new Set(); // [client, upstream] pairs carrying bytes
  const held = new Set(); // sockets of black-holed pairs, kept open until close()
  const relay = { connections: 0, port: 0 };
  const server = net.createServer((client) => {
    relay.connections += 1;
    const upstream = net.connect(port, '127.0.0.1');
    const pair = [client, upstream];
    let connected = false;
    client.on('error', () => upstream.destroy());
    client.on('close', () => live.delete(pair));
    // Until the upstream connects the client's bytes wait in its (paused) socket.
    upstream.on('connect', () => {
      connected = true;
      live.add(pair);
      client.pipe(upstream);
      upstream.pipe(client);
    });
    upstream.on('error', () => (connected ? client.end() : refuse(client)));
  });
  relay.blackhole = () => {
    for (const pair of live) {
      const [client, upstream] = pair;
      client.unpipe(upstream);
      upstream.unpipe(client);
      client.pause();
      upstream.pause();
      live.delete(pair);
      held.add(client).add(upstream);
    }
  };
  relay.close = () => {
    for (const socket of held) socket.destroy();
    server.close();
  };
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(Object.assign(relay, { port: server.address().port }))));
}

/** Answers a client's startup as a Postgres that is shutting down. */
function refuse(client) {
  client.on('data', (bytes) => {
    if (bytes.length === 8 && bytes.readInt32BE(4) === SSL_REQUEST) return client.write('N'); // no TLS; the startup follows
    const fields = Buffer.from('SFATAL\0VFATAL\0C57P03\0Mthe database system is shutting down (e2e relay)\0\0');
    const head = Buffer.alloc(5);
    head.write('E');
    head.writeInt32BE(4 + fields.length, 1);
    client.write(Buffer.concat([head, fields]));
  });
  client.on('end', () => client.end());
}

/** A Postgres URL with its port replaced by `port` (the relay's). */
export function via(port) {
  return (dbUrl) => {
    const u = new URL(dbUrl);
    u.port = String(port);
    return u.toString();
  };
}
