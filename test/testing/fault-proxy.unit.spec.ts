import { connect, createServer, Socket, type Server } from 'node:net';
import { FaultProxy } from '../../lib/testing';

// The fault kit's TCP proxy (nestjs-outbox/testing) in front of a local echo server: what a
// client sees through it when it is cut, frozen and restored, and that close() leaves nothing
// open, whatever state its connections were in.

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function until(what: string, done: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

describe('FaultProxy', () => {
  let echo: Server;
  let port = 0;
  const serverSide = new Set<Socket>();
  const clients: Socket[] = [];
  let proxy: FaultProxy | undefined;

  beforeAll(async () => {
    echo = createServer((socket) => {
      serverSide.add(socket);
      socket.on('close', () => serverSide.delete(socket));
      socket.on('error', () => undefined);
      socket.pipe(socket);
    });
    await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve));
    port = (echo.address() as { port: number }).port;
  });

  afterEach(async () => {
    for (const c of clients.splice(0)) c.destroy();
    await proxy?.close();
    proxy = undefined;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => echo.close(() => resolve()));
  });

  /** A client through the proxy, recording what it reads and how it ended. */
  async function client(): Promise<{ socket: Socket; got: () => string; ended: () => string }> {
    const p = proxy as FaultProxy;
    const socket = connect(p.port, p.host);
    clients.push(socket);
    let got = '';
    let ended = '';
    socket.on('data', (chunk: Buffer) => (got += chunk.toString()));
    socket.on('error', (error: NodeJS.ErrnoException) => (ended = error.code ?? 'error'));
    socket.on('close', () => (ended ||= 'closed'));
    await new Promise<void>((resolve) => socket.once('connect', resolve));
    return { socket, got: () => got, ended: () => ended };
  }

  it('forwards both ways while open', async () => {
    proxy = await FaultProxy.start({ host: '127.0.0.1', port });
    expect(proxy.endpoint).toEqual({ host: '127.0.0.1', port: proxy.port });
    const c = await client();
    c.socket.write('ping');
    await until('the echo', () => c.got() === 'ping');
    expect(proxy.state).toBe('open');
    expect(proxy.connections).toBe(1);
  });

  it('cut() resets open connections and refuses new ones until restore()', async () => {
    proxy = await FaultProxy.start({ host: '127.0.0.1', port });
    const c = await client();
    proxy.cut();
    await until('the reset', () => c.ended() !== '');
    expect(c.ended()).toBe('ECONNRESET');
    const refused = connect(proxy.port, proxy.host);
    clients.push(refused);
    const outcome = await new Promise<string>((resolve) => {
      refused.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
      refused.on('close', () => resolve('closed'));
    });
    expect(['ECONNRESET', 'closed']).toContain(outcome);
    expect(proxy.blocked).toBeGreaterThan(0);
    proxy.restore();
    const again = await client();
    again.socket.write('back');
    await until('the echo after restore', () => again.got() === 'back');
  });

  it('freeze() holds bytes both ways without closing, and restore() delivers them', async () => {
    proxy = await FaultProxy.start({ host: '127.0.0.1', port });
    const c = await client();
    proxy.freeze();
    c.socket.write('held');
    await sleep(200);
    expect(c.got()).toBe('');
    expect(c.ended()).toBe('');
    expect(proxy.state).toBe('blackhole');
    proxy.restore();
    await until('the held bytes', () => c.got() === 'held');
  });

  it('close() frees a connection it is still ending (its client reads nothing)', async () => {
    proxy = await FaultProxy.start({ host: '127.0.0.1', port });
    const proxyPort = proxy.port;
    const before = new Set(serverSide);
    // A client that reads nothing: what the server sends piles up in the proxy's socket to it.
    const c = connect({ port: proxyPort, host: '127.0.0.1', allowHalfOpen: true });
    clients.push(c);
    c.on('error', () => undefined);
    c.pause();
    await new Promise<void>((resolve) => c.once('connect', resolve));
    c.write('x');
    await until('the connection to the server', () => [...serverSide].some((s) => !before.has(s)));
    const [server] = [...serverSide].filter((s) => !before.has(s));
    // The server sends far more than the sockets' buffers hold, then ends: the proxy ends its
    // socket to the client, whose shutdown waits for the client to read, which it never does.
    server?.end(Buffer.alloc(32 * 1024 * 1024));
    await sleep(300);
    await proxy.close();
    proxy = undefined;
    // The socket the proxy accepted for this client (its local port is the proxy's) is gone.
    const own = () =>
      (process as unknown as { _getActiveHandles(): unknown[] })
        ._getActiveHandles()
        .filter((h) => h instanceof Socket && h.localPort === proxyPort);
    await until('the proxy to free its sockets', () => own().length === 0, 2_000);
  });
});
