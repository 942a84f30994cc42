import { createServer, type Server, type Socket } from 'node:net';
import { JsonSocket } from '@nestjs/microservices/helpers';
import { arrivalCounts, firstArrivalsByKey } from '../../../lib/testing';
import { waitFor } from '../wait-for';

/** One message as it reached the consumer. */
export interface Arrival {
  readonly messageId: string;
  readonly key: string | null;
  readonly type: string;
  readonly pattern: string;
  readonly payload: unknown;
  /** Local time of arrival (ms since epoch). */
  readonly at: number;
}

interface Packet {
  readonly id?: string;
  readonly pattern?: unknown;
  readonly data?: { messageId?: string; key?: string | null; type?: string; payload?: unknown };
}

/**
 * A real TCP endpoint speaking Nest's TCP transport framing (what `ClientTCP` talks to): it
 * records every message in arrival order. With `ack`, it answers request packets (`send()`, the
 * publisher's `mode: 'send'`), so a publish counts as done only once the consumer has the message.
 */
export class TcpConsumer {
  readonly arrivals: Arrival[] = [];
  port = 0;
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();

  constructor(private readonly options: { ack?: boolean } = {}) {}

  get running(): boolean {
    return this.server !== undefined;
  }

  /** Listens on 127.0.0.1 (on the previous port after a stop); resolves to the port. */
  async start(): Promise<number> {
    if (this.server !== undefined) return this.port;
    const server = createServer((socket) => this.accept(socket));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.server = server;
    this.port = (server.address() as { port: number }).port;
    return this.port;
  }

  /** The broker goes away: no new connections, open ones are cut. */
  async stop(): Promise<void> {
    const server = this.server;
    if (server === undefined) return;
    this.server = undefined;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    await closed;
  }

  ids(): string[] {
    return this.arrivals.map((a) => a.messageId);
  }

  /** How many times each message arrived. */
  counts(): Map<string, number> {
    return arrivalCounts(this.arrivals);
  }

  /** Message ids that arrived more than once. */
  duplicates(): string[] {
    return [...this.counts()].filter(([, n]) => n > 1).map(([id]) => id);
  }

  /** Per key, the message ids in order of their first arrival. */
  firstArrivalsByKey(): Map<string | null, string[]> {
    const keys = new Map(this.arrivals.map((a) => [a.messageId, a.key]));
    return firstArrivalsByKey(this.arrivals, (id) => keys.get(id));
  }

  /** Resolves once `predicate` holds; rejects after `timeoutMs`. */
  async until(predicate: (c: this) => boolean, timeoutMs: number, what: string): Promise<void> {
    await waitFor(`${what} at the TcpConsumer`, () => predicate(this), {
      timeoutMs,
      intervalMs: 20,
      describeState: () => `${this.arrivals.length} arrivals`,
    });
  }

  private accept(socket: Socket): void {
    if (this.server === undefined) {
      socket.destroy();
      return;
    }
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => undefined);
    const json = new JsonSocket(socket);
    json.on('error', () => undefined);
    json.on('message', (packet: Packet) => {
      if (this.server === undefined) return; // arrived after the cut: the broker is gone
      const data = packet.data ?? {};
      if (typeof data.messageId !== 'string') return;
      this.arrivals.push({
        messageId: data.messageId,
        key: data.key ?? null,
        type: String(data.type),
        pattern: String(packet.pattern),
        payload: data.payload,
        at: Date.now(),
      });
      if (this.options.ack === true && packet.id !== undefined) {
        json.sendMessage({ id: packet.id, response: 'ack', isDisposed: true });
      }
    });
  }
}
