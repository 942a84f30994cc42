/** RabbitMQ helpers: queues, confirm channels, and a consumer that checks what arrived. */
import { createHash } from 'node:crypto';
import * as amqp from 'amqplib';
import { SERVICES } from './config';
import { toError } from './stats';
import { sleep } from '../../test/support/wait-for';

/**
 * The bench's own management connection. Reopened when it was lost (other test suites on the
 * machine restart RabbitMQ now and then).
 */
export class Rabbit {
  private connection: amqp.ChannelModel | undefined;
  private channel: amqp.Channel | undefined;
  version = 'unknown';

  async ch(): Promise<amqp.Channel> {
    if (this.channel !== undefined) return this.channel;
    for (let attempt = 0; ; attempt++) {
      try {
        const connection = await amqp.connect(SERVICES.rabbitmq.url);
        connection.on('error', () => undefined);
        connection.on('close', () => {
          this.connection = undefined;
          this.channel = undefined;
        });
        const channel = await connection.createChannel();
        channel.on('error', () => undefined);
        channel.on('close', () => {
          if (this.channel === channel) this.channel = undefined;
        });
        const props = (
          connection.connection as unknown as { serverProperties?: { version?: string } }
        ).serverProperties;
        this.version = props?.version ?? 'unknown';
        this.connection = connection;
        this.channel = channel;
        return channel;
      } catch (error) {
        if (attempt >= 30) throw error;
        await sleep(1_000);
      }
    }
  }

  async deleteQueue(queue: string): Promise<void> {
    await (await this.ch()).deleteQueue(queue);
  }

  async close(): Promise<void> {
    const connection = this.connection;
    this.connection = undefined;
    this.channel = undefined;
    if (connection === undefined) return;
    // Bounded: a connection the broker dropped while the event loop was blocked (missed
    // heartbeats during P9's long synchronous SQLite statements) never answers its close, and
    // with nothing else pending Node would exit mid-run without a word.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      connection.close().catch(() => undefined),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, 5_000);
      }),
    ]);
    clearTimeout(timer);
  }
}

export async function openRabbit(): Promise<Rabbit> {
  const rabbit = new Rabbit();
  await rabbit.ch();
  return rabbit;
}

/** Deletes and re-declares a durable queue (optionally capped, for drains nobody reads). */
export async function resetQueue(rabbit: Rabbit, queue: string, maxLength?: number): Promise<void> {
  const channel = await rabbit.ch();
  await channel.deleteQueue(queue);
  await channel.assertQueue(queue, {
    durable: true,
    arguments:
      maxLength === undefined ? {} : { 'x-max-length': maxLength, 'x-overflow': 'drop-head' },
  });
}

export async function purgeQueue(rabbit: Rabbit, queue: string): Promise<void> {
  await (await rabbit.ch()).purgeQueue(queue);
}

export async function queueDepth(rabbit: Rabbit, queue: string): Promise<number> {
  return (await (await rabbit.ch()).checkQueue(queue)).messageCount;
}

export interface DeliveryCheck {
  /** Messages read from the queue. */
  readonly received: number;
  /** Distinct message ids among them. */
  readonly unique: number;
  readonly duplicates: number;
  /** Messages of a key that arrived after a later one of the same key (by payload seq). */
  readonly orderViolations: number;
  /** Expected sequence numbers that never arrived. */
  readonly missing: number;
}

/**
 * Reads everything in `queue` (no ack) and checks it: one copy of each of `expected` messages
 * (payload seq 1…expected), and per key in increasing seq order.
 */
export async function readAndCheck(
  queue: string,
  expected: number,
  options: { quietMs?: number; timeoutMs?: number } = {},
): Promise<DeliveryCheck> {
  const connection = await amqp.connect(SERVICES.rabbitmq.url);
  const channel = await connection.createChannel();
  const ids = new Set<string>();
  const seen = new Uint8Array(expected + 1);
  const lastSeq = new Map<string, number>();
  let received = 0;
  let orderViolations = 0;
  let last = Date.now();
  try {
    await channel.consume(
      queue,
      (msg) => {
        if (msg === null) return;
        received++;
        last = Date.now();
        const id = msg.properties.messageId as string | undefined;
        if (id !== undefined) ids.add(id);
        const text = msg.content.toString('utf8');
        const seq = Number(/"seq":(\d+)/.exec(text)?.[1] ?? -1);
        const key = /"key":"([^"]*)"/.exec(text)?.[1] ?? '';
        // Order is about first publications: a re-published copy (a duplicate) is not a violation.
        if (seq >= 0 && seq <= expected) {
          if (seen[seq] === 1) return;
          seen[seq] = 1;
        }
        const prev = lastSeq.get(key);
        if (prev !== undefined && seq <= prev) orderViolations++;
        lastSeq.set(key, seq);
      },
      { noAck: true },
    );
    const quietMs = options.quietMs ?? 300;
    const deadline = Date.now() + (options.timeoutMs ?? 120_000);
    while (Date.now() < deadline) {
      await sleep(50);
      if (received >= expected && Date.now() - last > quietMs) break;
      if (received < expected && Date.now() - last > Math.max(quietMs, 3_000)) break;
    }
  } finally {
    await channel.close().catch(() => undefined);
    await connection.close().catch(() => undefined);
  }
  let missing = 0;
  for (let s = 1; s <= expected; s++) if (seen[s] === 0) missing++;
  return { received, unique: ids.size, duplicates: received - ids.size, orderViolations, missing };
}

/** A confirm channel of its own, for the hand-written relays. */
export async function openConfirmChannel(): Promise<{
  connection: amqp.ChannelModel;
  channel: amqp.ConfirmChannel;
  close(): Promise<void>;
}> {
  const connection = await amqp.connect(SERVICES.rabbitmq.url);
  const channel = await connection.createConfirmChannel();
  return {
    connection,
    channel,
    close: async () => {
      await channel.close().catch(() => undefined);
      await connection.close().catch(() => undefined);
    },
  };
}

/**
 * Publishes on a confirm channel with at most `maxOutstanding` unconfirmed messages (shared by
 * every caller of this window), honouring the channel's write buffer.
 */
export class ConfirmWindow {
  private outstanding = 0;
  private waiters: (() => void)[] = [];
  private needsDrain = false;

  constructor(
    private readonly channel: amqp.ConfirmChannel,
    private readonly maxOutstanding: number,
  ) {
    channel.on('drain', () => {
      this.needsDrain = false;
      this.wakeAll();
    });
  }

  async publish(
    exchange: string,
    routingKey: string,
    content: Buffer,
    options: amqp.Options.Publish,
  ): Promise<void> {
    while (this.outstanding >= this.maxOutstanding || this.needsDrain) {
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
    this.outstanding++;
    return new Promise<void>((resolve, reject) => {
      const ok = this.channel.publish(exchange, routingKey, content, options, (error: unknown) => {
        this.outstanding--;
        this.wakeOne();
        if (error === null || error === undefined) resolve();
        else reject(toError(error));
      });
      if (!ok) this.needsDrain = true;
    });
  }

  private wakeOne(): void {
    this.waiters.shift()?.();
  }

  private wakeAll(): void {
    for (const w of this.waiters.splice(0)) w();
  }
}

/** A confirm channel (and its window) for the hand-written relays, reopened after a broker restart. */
export class ConfirmLink {
  private current:
    | { connection: amqp.ChannelModel; channel: amqp.ConfirmChannel; window: ConfirmWindow }
    | undefined;

  constructor(private readonly maxOutstanding = 1_000) {}

  async get(): Promise<{ channel: amqp.ConfirmChannel; window: ConfirmWindow }> {
    if (this.current !== undefined) return this.current;
    const connection = await amqp.connect(SERVICES.rabbitmq.url);
    const channel = await connection.createConfirmChannel();
    const link = { connection, channel, window: new ConfirmWindow(channel, this.maxOutstanding) };
    const drop = (): void => {
      if (this.current === link) this.current = undefined;
    };
    connection.on('error', () => undefined);
    connection.on('close', drop);
    channel.on('error', () => undefined);
    channel.on('close', drop);
    this.current = link;
    return link;
  }

  async close(): Promise<void> {
    const link = this.current;
    this.current = undefined;
    await link?.channel.close().catch(() => undefined);
    await link?.connection.close().catch(() => undefined);
  }
}

/** What a payload check found at the consumer. */
export interface PayloadCheck {
  readonly received: number;
  /** Copies of a message beyond its first. */
  readonly duplicates: number;
  /** Expected messages that never arrived. */
  readonly missing: number;
  /** Messages whose body differs from the enqueued JSON (length or SHA-256), or unknown ids. */
  readonly mismatched: number;
}

/**
 * Consumes `queue` from now on and checks every message against `expected` (by message id: its
 * body's length and SHA-256, byte for byte what was enqueued). `done()` waits until every
 * expected message arrived (or nothing arrived for `quietMs`) and stops consuming.
 */
export async function checkPayloads(
  queue: string,
  expected: readonly { messageId: string; bytes: number; sha256: string }[],
): Promise<{ done(quietMs?: number, timeoutMs?: number): Promise<PayloadCheck> }> {
  const connection = await amqp.connect(SERVICES.rabbitmq.url);
  const channel = await connection.createChannel();
  const wanted = new Map(expected.map((e) => [e.messageId, e]));
  const seen = new Map<string, number>();
  let received = 0;
  let mismatched = 0;
  let last = Date.now();
  await channel.prefetch(2);
  await channel.consume(queue, (msg) => {
    if (msg === null) return;
    received++;
    last = Date.now();
    const id = String(msg.properties.messageId);
    const want = wanted.get(id);
    const sha256 = createHash('sha256').update(msg.content).digest('hex');
    if (want === undefined || want.bytes !== msg.content.length || want.sha256 !== sha256)
      mismatched++;
    seen.set(id, (seen.get(id) ?? 0) + 1);
    channel.ack(msg);
  });
  return {
    async done(quietMs = 3_000, timeoutMs = 120_000) {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        if ([...wanted.keys()].every((id) => seen.has(id))) break;
        if (Date.now() - last > quietMs) break;
        await sleep(20);
      }
      await sleep(200); // a late duplicate
      await channel.close().catch(() => undefined);
      await connection.close().catch(() => undefined);
      let missing = 0;
      let duplicates = 0;
      for (const id of wanted.keys()) if (!seen.has(id)) missing++;
      for (const n of seen.values()) duplicates += n - 1;
      return { received, duplicates, missing, mismatched };
    },
  };
}
