import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  jetstream,
  jetstreamManager,
  type JetStreamManager,
  type JsMsg,
  type StreamConfig,
} from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { canConnect, SERVICES } from '../services';
import { waitFor } from '../wait-for';
import { Collector } from './collector';
import { freePort } from './net';

// JetStream for the specs: streams of their own (a unique name and subjects per test, deleted
// afterwards), an ordered consumer that reads a stream from its start, and a private nats-server
// for the tests that stop the server (never the shared one on 4222).

export const JETSTREAM_URL = `nats://${SERVICES.nats.host}:${SERVICES.nats.port}`;
export const NATS_SERVER_BIN = process.env.NATS_SERVER_BIN ?? '/usr/sbin/nats-server';

type NatsConnection = Awaited<ReturnType<typeof connect>>;

/** One message as a JetStream consumer got it. */
export interface JetStreamReceived {
  readonly subject: string;
  readonly seq: number;
  readonly data: Buffer;
  readonly headers: Record<string, string>;
  /** The `x-outbox-message-id` header. */
  readonly messageId: string;
  readonly message: JsMsg;
}

export interface TestStream {
  readonly name: string;
  readonly subjects: string[];
  /** How many messages the stream holds now. */
  count(): Promise<number>;
  delete(): Promise<void>;
}

let counter = 0;
/** A name no other test (or run) uses: usable as a stream name and as a subject token. */
export const uniqueStreamName = (what: string): string =>
  `outbox_${what}_${process.pid}_${++counter}_${randomUUID().slice(0, 8)}`;

/** A JetStream admin connection to `url`, closed by `close()`. */
export async function jetStreamAdmin(url = JETSTREAM_URL): Promise<{
  readonly nc: NatsConnection;
  readonly jsm: JetStreamManager;
  createStream(config?: Partial<StreamConfig>, what?: string): Promise<TestStream>;
  close(): Promise<void>;
}> {
  const nc = await connect({ servers: url });
  const jsm = await jetstreamManager(nc);
  const created = new Set<string>();
  return {
    nc,
    jsm,
    async createStream(config = {}, what = 'it') {
      const name = uniqueStreamName(what);
      const subjects = config.subjects ?? [`${name}.>`];
      await jsm.streams.add({ duplicate_window: 120_000_000_000, ...config, name, subjects });
      created.add(name);
      return {
        name,
        subjects,
        count: async () => (await jsm.streams.info(name)).state.messages,
        delete: async () => {
          created.delete(name);
          await jsm.streams.delete(name).catch(() => undefined);
        },
      };
    },
    async close() {
      for (const name of created) await jsm.streams.delete(name).catch(() => undefined);
      // The connection's type does not resolve under this project's module resolution (see
      // lib/publishers/jetstream/nats-client.ts); close() is all this needs of it.
      await (nc as unknown as { close(): Promise<void> }).close();
    },
  };
}

/** Reads `stream` from its first message on with an ordered consumer, into a collector. */
export async function consumeStream(
  nc: NatsConnection,
  stream: string,
): Promise<{ readonly received: Collector<JetStreamReceived>; close(): Promise<void> }> {
  const received = new Collector<JetStreamReceived>();
  const consumer = await jetstream(nc).consumers.get(stream);
  const messages = await consumer.consume();
  const done = (async () => {
    for await (const m of messages) {
      const headers: Record<string, string> = {};
      for (const [name, values] of m.headers ?? []) headers[name] = values[0] ?? '';
      received.push({
        subject: m.subject,
        seq: m.seq,
        data: Buffer.from(m.data),
        headers,
        messageId: headers['x-outbox-message-id'] ?? '',
        message: m,
      });
    }
  })();
  return {
    received,
    close: async () => {
      await messages.close();
      await done;
    },
  };
}

/**
 * A nats-server of the test's own, with JetStream and a store directory that survives `stop()`,
 * so that `start()` brings the same streams back on the same port.
 */
export class PrivateNatsServer {
  private process: ChildProcess | undefined;
  private constructor(
    readonly port: number,
    private readonly storeDir: string,
  ) {}

  static async start(): Promise<PrivateNatsServer> {
    if (!existsSync(NATS_SERVER_BIN)) throw new Error(`no nats-server at ${NATS_SERVER_BIN}`);
    const server = new PrivateNatsServer(
      await freePort(),
      mkdtempSync(join(tmpdir(), 'outbox-nats-')),
    );
    await server.start();
    return server;
  }

  get running(): boolean {
    return this.process !== undefined && this.process.exitCode === null;
  }

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  /** Starts the server and resolves once JetStream is ready. */
  async start(): Promise<void> {
    const child = spawn(
      NATS_SERVER_BIN,
      ['-a', '127.0.0.1', '-p', String(this.port), '-js', '-sd', this.storeDir],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    this.process = child;
    let log = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      log = (log + chunk.toString()).slice(-4_000);
    });
    await waitFor(
      'the private nats-server to be ready',
      () => {
        if (child.exitCode !== null) throw new Error(`nats-server exited: ${log}`);
        return log.includes('Server is ready');
      },
      { timeoutMs: 20_000, intervalMs: 20 },
    );
  }

  /** Stops the server (SIGKILL: as a crash, nothing flushed to clients) and waits for its port to close. */
  async stop(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const child = this.process;
    this.process = undefined;
    if (child === undefined || child.exitCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill(signal);
    await exited;
    await waitFor('the port to close', async () => !(await canConnect('127.0.0.1', this.port)), {
      timeoutMs: 10_000,
    });
  }

  async dispose(): Promise<void> {
    await this.stop();
    rmSync(this.storeDir, { recursive: true, force: true });
  }
}
