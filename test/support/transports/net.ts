import { connect, createServer, type Server, type Socket } from 'node:net';

/** A TCP port nothing listens on at the time of the call. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/**
 * An MQTT "broker" that accepts the connection (CONNACK) and then never answers again: a QoS 1
 * publish to it waits forever for its PUBACK. The model of a transport that hangs without an error.
 */
export async function startBlackholeMqttBroker(): Promise<{
  port: number;
  published: () => number;
  close(): Promise<void>;
}> {
  const sockets = new Set<Socket>();
  let publishes = 0;
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    let connected = false;
    socket.on('data', (chunk) => {
      // Packet type in the high nibble of the first byte: 1 CONNECT, 3 PUBLISH (counted roughly per chunk).
      if (!connected && chunk[0] !== undefined && chunk[0] >> 4 === 1) {
        connected = true;
        socket.write(Buffer.from([0x20, 0x02, 0x00, 0x00])); // CONNACK (3.1.1), accepted
        return;
      }
      if (chunk[0] !== undefined && chunk[0] >> 4 === 3) publishes += 1;
    });
  });
  const port = await new Promise<number>((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      resolve(typeof address === 'object' && address !== null ? address.port : 0);
    });
  });
  return {
    port,
    published: () => publishes,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * A TCP relay to a real server whose replies can be held back: while `holdReplies()` is in
 * force the client's bytes still reach the server, but nothing the server sends reaches the
 * client until `release()`. The model of a network that stalls one way (a broker's confirms
 * that do not come back) without an error on either side.
 */
export async function startTcpRelay(
  host: string,
  port: number,
): Promise<{
  port: number;
  holdReplies(): void;
  release(): void;
  /** Client connections still open through the relay. */
  connections(): number;
  close(): Promise<void>;
}> {
  const sockets = new Set<Socket>();
  const toClients = new Set<{ client: Socket; held: Buffer[] }>();
  let holding = false;
  const server: Server = createServer((client) => {
    const upstream = connect({ host, port });
    const pipe = { client, held: [] as Buffer[] };
    toClients.add(pipe);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => undefined);
      socket.on('close', () => {
        sockets.delete(socket);
        toClients.delete(pipe);
        client.destroy();
        upstream.destroy();
      });
    }
    client.on('data', (chunk) => upstream.write(chunk));
    upstream.on('data', (chunk) => {
      if (holding) pipe.held.push(chunk);
      else client.write(chunk);
    });
  });
  const listening = await new Promise<number>((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      resolve(typeof address === 'object' && address !== null ? address.port : 0);
    });
  });
  return {
    port: listening,
    holdReplies: () => {
      holding = true;
    },
    connections: () => toClients.size,
    release: () => {
      holding = false;
      for (const pipe of toClients)
        for (const chunk of pipe.held.splice(0)) pipe.client.write(chunk);
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
