/** NATS JetStream for the bench: a stream per run, and the bare client's own ceiling. */
import { randomUUID } from 'node:crypto';
import { jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import * as transport from '@nats-io/transport-node';
import { SERVICES as TEST_SERVICES } from '../../test/support/services';
import { keyOf, payloadOf } from './databases';

export const NATS_URL = `nats://${TEST_SERVICES.nats.host}:${TEST_SERVICES.nats.port}`;

/** The connection and header set of the client, typed by what the bench uses (see lib/publishers/jetstream/nats-client.ts). */
interface Connection {
  close(): Promise<void>;
}
interface HeaderSet {
  set(name: string, value: string): void;
}
const client = transport as unknown as {
  connect(options: Record<string, unknown>): Promise<Connection>;
  headers(): HeaderSet;
};

export interface BenchStream {
  readonly name: string;
  readonly subject: string;
  readonly manager: JetStreamManager;
  count(): Promise<number>;
  purge(): Promise<void>;
  close(): Promise<void>;
}

/** A file-backed stream of this run's own (2 min duplicate window, the server's default). */
export async function openBenchStream(name: string): Promise<BenchStream> {
  const nc = await client.connect({ servers: NATS_URL });
  const manager = await jetstreamManager(nc);
  const subject = `${name}.events`;
  await manager.streams.delete(name).catch(() => undefined);
  await manager.streams.add({ name, subjects: [`${name}.>`] });
  return {
    name,
    subject,
    manager,
    count: async () => (await manager.streams.info(name)).state.messages,
    purge: async () => {
      await manager.streams.purge(name);
    },
    close: async () => {
      await manager.streams.delete(name).catch(() => undefined);
      await nc.close();
    },
  };
}

/**
 * The client's own ceiling: the same `@nats-io/jetstream` publish the module uses, with the same
 * messages (1 KiB JSON, `Nats-Msg-Id` and the three `x-outbox-*` headers), pipelined with up to
 * `window` PubAcks outstanding (the dispatcher's default: two batches of 500), no database.
 * Resolves to the messages the stream acknowledged as new.
 */
export async function bareJetStreamPublish(
  subject: string,
  count: number,
  window = 1_000,
): Promise<number> {
  const nc = await client.connect({ servers: NATS_URL, noAsyncTraces: true });
  const js = jetstream(nc, { timeout: 5_000 });
  let stored = 0;
  let next = 1;
  try {
    const lane = async (): Promise<void> => {
      while (next <= count) {
        const seq = next++;
        const key = keyOf(seq);
        // Ids of their own every run: the stream's duplicate window outlives a purge.
        const id = randomUUID();
        const headers = client.headers();
        headers.set('x-outbox-message-id', id);
        headers.set('x-outbox-type', 'order.created');
        headers.set('x-outbox-key', key);
        const ack = await js.publish(subject, payloadOf(seq, key), {
          msgID: id,
          headers: headers as never,
          timeout: 5_000,
        });
        if (!ack.duplicate) stored++;
      }
    };
    await Promise.all(Array.from({ length: window }, lane));
  } finally {
    await nc.close();
  }
  return stored;
}
