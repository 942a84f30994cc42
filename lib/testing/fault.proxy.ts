import { connect, createServer, type Server, type Socket } from 'node:net';
import { refuseUnknownTestingOptions } from './testing-option-keys';

/**
 * How a cut proxy fails its clients:
 * - `'reset'`: every open connection is reset (both ends) and every new one is reset as soon as
 *   it is accepted, as when the database server crashes or restarts;
 * - `'blackhole'`: connections stay open and new ones are accepted, but nothing passes either
 *   way, as in a network partition: calls hang without an answer. What was sent meanwhile is
 *   delivered on `restore()`, as TCP retransmission delivers it once a partition heals.
 */
export type FaultProxyCut = 'reset' | 'blackhole';

/** A TCP server's address. */
export interface FaultProxyEndpoint {
  readonly host: string;
  readonly port: number;
}

/** How `FaultProxy.start` listens. */
export interface FaultProxyOptions {
  /**
   * The proxy closes itself after this long, so a test that fails before `close()` leaves
   * nothing listening. @default 600000
   */
  readonly lifetimeMs?: number;
  /** The address the proxy listens on (port: a free one). @default '127.0.0.1' */
  readonly listenHost?: string;
}

/** One client connection and, once dialled, its connection to the target. */
interface Link {
  readonly client: Socket;
  server: Socket | undefined;
  /** Bytes held back while the link is blackholed (or not yet dialled), by direction. */
  readonly toServer: Buffer[];
  readonly toClient: Buffer[];
  /** The server's next answer on this link is lost: the proxy cuts instead (resetOnAnswerTo). */
  loseAnswer: FaultProxyCut | undefined;
}

/**
 * A TCP proxy in front of a server (a database, a broker), for tests that take the server away
 * from one client (`cut`, `freeze`) and give it back (`restore`) while others keep talking to it
 * directly: point the app under test at `proxy.host`/`proxy.port` instead of the server. It
 * needs no test framework, and closes itself after `lifetimeMs` so a test that fails before
 * `close()` leaves nothing listening.
 *
 * ```ts
 * const proxy = await FaultProxy.start({ host: '127.0.0.1', port: 5432 });
 * // … the dispatcher connects to proxy.port …
 * proxy.cut(); // connections reset, as when the server restarts
 * proxy.restore();
 * await proxy.close();
 * ```
 */
export class FaultProxy {
  private mode: 'open' | FaultProxyCut = 'open';
  private closed = false;
  private readonly links = new Set<Link>();
  private blockedCount = 0;
  private losesAnswerTo: { readonly request: RegExp; readonly how: FaultProxyCut } | undefined;
  private readonly lifetime: NodeJS.Timeout;

  private constructor(
    private readonly server: Server,
    /** The address clients connect to instead of the target's. */
    readonly host: string,
    readonly port: number,
    private readonly target: FaultProxyEndpoint,
    lifetimeMs: number,
  ) {
    server.on('connection', (socket: Socket) => this.accept(socket));
    this.lifetime = setTimeout(() => this.shut(), lifetimeMs);
    this.lifetime.unref();
  }

  /** Listens on a free port and forwards every connection to `target`. */
  static async start(
    target: FaultProxyEndpoint,
    options: FaultProxyOptions = {},
  ): Promise<FaultProxy> {
    refuseUnknownTestingOptions('FaultProxy.start()', options, {
      '': { lifetimeMs: true, listenHost: true } satisfies Record<keyof FaultProxyOptions, true>,
    });
    const { lifetimeMs = 600_000, listenHost = '127.0.0.1' } = options;
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, listenHost, () => {
        server.off('error', reject);
        resolve();
      });
    });
    const { port } = server.address() as { port: number };
    return new FaultProxy(server, listenHost, port, target, lifetimeMs);
  }

  /** Where clients connect: `{ host, port }` of the proxy. */
  get endpoint(): FaultProxyEndpoint {
    return { host: this.host, port: this.port };
  }

  /** `'open'` while forwarding, otherwise how it is cut. */
  get state(): 'open' | FaultProxyCut {
    return this.mode;
  }

  /** Client connections open now. */
  get connections(): number {
    return this.links.size;
  }

  /**
   * How many times a client met the cut: a connection reset on arrival, or bytes held back by
   * the blackhole. Proof that the client tried to reach the server while it was gone.
   */
  get blocked(): number {
    return this.blockedCount;
  }

  /**
   * Takes the server away: `'reset'` (the default) resets every connection, as a crash or a
   * restart of the server does; `'blackhole'` is `freeze()`.
   */
  cut(how: FaultProxyCut = 'reset'): void {
    this.mode = how;
    if (how === 'reset') for (const link of [...this.links]) this.reset(link);
  }

  /**
   * Freezes the link, as a network partition or a paused server does: connections stay open,
   * nothing passes either way, and calls hang until their own timeouts or `restore()`.
   */
  freeze(): void {
    this.cut('blackhole');
  }

  /**
   * Cuts (`'reset'`) when the server answers the next request whose text matches `request`: the
   * server did what it was asked (a COMMIT, say) and the client never learns it.
   */
  resetOnAnswerTo(request: RegExp): void {
    this.losesAnswerTo = { request, how: 'reset' };
  }

  /**
   * Cuts as a `'blackhole'` when the server answers the next request whose text matches
   * `request`: the server did what it was asked and the client waits for an answer that does
   * not come, until its own timeout.
   */
  holdAnswerTo(request: RegExp): void {
    this.losesAnswerTo = { request, how: 'blackhole' };
  }

  /** Forwards again; a blackhole's held connections get what was sent meanwhile. */
  restore(): void {
    this.mode = 'open';
    for (const link of this.links) {
      if (link.server === undefined) this.dial(link);
      else this.flush(link, link.server);
    }
  }

  /** Stops listening and drops every connection. */
  async close(): Promise<void> {
    const stopped = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.shut();
    await stopped;
  }

  private shut(): void {
    clearTimeout(this.lifetime);
    this.closed = true;
    if (this.server.listening) this.server.close();
    for (const link of [...this.links]) this.reset(link);
  }

  private accept(client: Socket): void {
    if (this.closed || this.mode === 'reset') {
      if (!this.closed) this.blockedCount += 1;
      client.on('error', () => undefined);
      client.resetAndDestroy();
      return;
    }
    const link: Link = {
      client,
      server: undefined,
      toServer: [],
      toClient: [],
      loseAnswer: undefined,
    };
    this.links.add(link);
    client.on('data', (chunk: Buffer) => {
      if (this.mode === 'open' && link.server !== undefined) {
        if (this.losesAnswerTo?.request.test(chunk.toString('latin1')) === true) {
          link.loseAnswer = this.losesAnswerTo.how;
          this.losesAnswerTo = undefined;
        }
        link.server.write(chunk);
        return;
      }
      if (this.mode === 'blackhole') this.blockedCount += 1;
      link.toServer.push(chunk);
    });
    this.onEnd(link, client, () => link.server);
    if (this.mode === 'open') this.dial(link);
  }

  private dial(link: Link): void {
    const server = connect(this.target.port, this.target.host);
    link.server = server;
    server.on('data', (chunk: Buffer) => {
      if (link.loseAnswer !== undefined) {
        const how = link.loseAnswer;
        link.loseAnswer = undefined;
        this.cut(how);
        if (how === 'blackhole') link.toClient.push(chunk);
      } else if (this.mode === 'open') link.client.write(chunk);
      else link.toClient.push(chunk);
    });
    this.onEnd(link, server, () => link.client);
    this.flush(link, server);
  }

  private flush(link: Link, server: Socket): void {
    for (const chunk of link.toServer.splice(0)) server.write(chunk);
    for (const chunk of link.toClient.splice(0)) link.client.write(chunk);
  }

  /**
   * When one end closes, the other is closed too: gracefully while forwarding, so that a last
   * message (a driver's goodbye) still gets through, and at once otherwise.
   */
  private onEnd(link: Link, socket: Socket, peer: () => Socket | undefined): void {
    socket.on('error', () => undefined);
    socket.on('close', (hadError) => {
      const other = peer();
      if (other !== undefined && !other.destroyed) {
        if (hadError || this.mode !== 'open') other.destroy();
        else other.end();
      }
      if (link.client.destroyed && (link.server?.destroyed ?? true)) this.links.delete(link);
    });
  }

  private reset(link: Link): void {
    this.links.delete(link);
    link.toServer.length = 0;
    link.toClient.length = 0;
    abort(link.client);
    if (link.server !== undefined) abort(link.server);
  }
}

/**
 * Resets `socket`, or destroys it if it was ended already: libuv refuses to reset a socket after
 * its shutdown (EINVAL), and Node then leaves it open for ever.
 */
function abort(socket: Socket): void {
  if (socket.destroyed) return;
  if (socket.writableEnded) socket.destroy();
  else socket.resetAndDestroy();
}
