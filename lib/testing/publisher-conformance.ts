import type { OutboxRecord } from '../message/outbox-record.interface';
import { UuidV7Generator } from '../message/uuidv7';
import type { OutboxPublisher, PublishOutcome } from '../publishers/outbox-publisher.interface';

/**
 * One publisher wired to a real broker for one case of the conformance suite: messages published
 * to `topic` must reach a consumer, which reports their message ids (`x-outbox-message-id`, or
 * the envelope's `messageId`) through `received()`.
 */
export interface PublisherConformanceFixture {
  readonly publisher: OutboxPublisher;
  readonly topic: string;
  /** The message ids a consumer received so far, in arrival order, duplicates included. */
  received(): readonly string[];
  /** Closes the publisher (if the fixture owns it) and the consumer. */
  tearDown(): Promise<void>;
}

export interface PublisherConformanceTarget {
  readonly name: string;
  /** A fresh fixture per case: a topic of its own and a consumer already listening on it. */
  setUp(): Promise<PublisherConformanceFixture>;
  /**
   * Whether the broker keeps the order of one key's messages (Kafka partitions, a RabbitMQ
   * queue, NATS and Redis subjects): then the suite checks that a batch of one key arrives in
   * input order. @default true
   */
  readonly ordersByKey?: boolean;
}

/** One case of the suite: throws an `Error` saying what broke the contract. */
export interface PublisherConformanceCase {
  readonly name: string;
  run(target: PublisherConformanceTarget): Promise<void>;
}

/** How long a case waits for messages to arrive, and for late duplicates after that. */
export interface PublisherConformanceTimings {
  /** @default 10000 */
  readonly arrivalTimeoutMs?: number;
  /** @default 300 */
  readonly quietMs?: number;
}

const ids = new UuidV7Generator();

function records(topic: string, count: number, key: (i: number) => string | null): OutboxRecord[] {
  return Array.from({ length: count }, (_, i) => ({
    id: String(i + 1),
    messageId: ids.next(),
    topic,
    key: key(i),
    type: 'conformance.checked',
    payload: JSON.stringify({ n: i }),
    headers: { 'x-conformance': 'yes' },
    attempts: 1,
    createdAt: new Date(),
  }));
}

function fail(what: string, detail?: unknown): never {
  throw new Error(detail === undefined ? what : `${what}: ${JSON.stringify(detail)}`);
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function arrivals(
  fixture: PublisherConformanceFixture,
  expected: readonly string[],
  timings: Required<PublisherConformanceTimings>,
): Promise<readonly string[]> {
  const deadline = Date.now() + timings.arrivalTimeoutMs;
  const wanted = new Set(expected);
  const count = () => fixture.received().filter((id) => wanted.has(id)).length;
  while (count() < expected.length) {
    if (Date.now() > deadline) {
      fail(
        `${count()} of ${expected.length} messages reached the consumer within ${timings.arrivalTimeoutMs} ms`,
      );
    }
    await sleep(20);
  }
  // Late copies (a resend, a second routing) show up after the first arrivals.
  await sleep(timings.quietMs);
  return fixture.received().filter((id) => wanted.has(id));
}

function expectAllOk(outcomes: readonly PublishOutcome[], count: number): void {
  if (outcomes.length !== count) fail(`expected ${count} outcomes, got ${outcomes.length}`);
  const failed = outcomes.findIndex((o) => !o.ok);
  if (failed >= 0)
    fail(
      `message ${failed} was not acknowledged`,
      String((outcomes[failed] as { error: unknown }).error),
    );
}

async function withFixture(
  target: PublisherConformanceTarget,
  body: (fixture: PublisherConformanceFixture) => Promise<void>,
): Promise<void> {
  const fixture = await target.setUp();
  try {
    await body(fixture);
  } finally {
    await fixture.tearDown();
  }
}

/**
 * The contract every `OutboxPublisher` keeps, as cases any test runner can run (each throws on
 * a breach), against a real broker:
 *
 * ```ts
 * describe.each(targets)('$name', (target) => {
 *   it.each(publisherConformanceCases())('$name', (c) => c.run(target));
 * });
 * ```
 */
export function publisherConformanceCases(
  timings: PublisherConformanceTimings = {},
): readonly PublisherConformanceCase[] {
  const t = { arrivalTimeoutMs: 10_000, quietMs: 300, ...timings };
  const live = () => new AbortController().signal;
  return [
    {
      name: 'an empty batch gives no outcomes',
      run: (target) =>
        withFixture(target, async ({ publisher }) => {
          const outcomes = await publisher.publish([], live());
          if (outcomes.length !== 0) fail('expected no outcomes', outcomes);
        }),
    },
    {
      name: 'one outcome per message, in input order, and each acknowledged message arrives once',
      run: (target) =>
        withFixture(target, async (fixture) => {
          const batch = records(fixture.topic, 20, (i) => `k${i % 4}`);
          expectAllOk(await fixture.publisher.publish(batch, live()), batch.length);
          const got = await arrivals(
            fixture,
            batch.map((r) => r.messageId),
            t,
          );
          if (got.length !== batch.length)
            fail(`expected ${batch.length} arrivals, got ${got.length} (copies)`);
        }),
    },
    {
      name: 'messages of one key arrive in the order of the batch',
      run: async (target) => {
        if (target.ordersByKey === false) return;
        await withFixture(target, async (fixture) => {
          const batch = records(fixture.topic, 10, () => 'one-key');
          expectAllOk(await fixture.publisher.publish(batch, live()), batch.length);
          const expected = batch.map((r) => r.messageId);
          const got = await arrivals(fixture, expected, t);
          if (got.join() !== expected.join())
            fail('arrival order differs from the batch', { expected, got });
        });
      },
    },
    {
      name: 'consecutive batches are all delivered',
      run: (target) =>
        withFixture(target, async (fixture) => {
          const first = records(fixture.topic, 5, () => null);
          const second = records(fixture.topic, 5, () => null);
          expectAllOk(await fixture.publisher.publish(first, live()), 5);
          expectAllOk(await fixture.publisher.publish(second, live()), 5);
          await arrivals(
            fixture,
            [...first, ...second].map((r) => r.messageId),
            t,
          );
        }),
    },
    {
      name: 'an aborted signal ends the call promptly, and what it calls published arrived',
      run: (target) =>
        withFixture(target, async (fixture) => {
          const batch = records(fixture.topic, 3, () => null);
          const controller = new AbortController();
          controller.abort(new Error('conformance: aborted'));
          const settled = await Promise.race([
            fixture.publisher.publish(batch, controller.signal).then(
              (outcomes) => ({ outcomes }),
              () => ({ outcomes: [] as readonly PublishOutcome[] }),
            ),
            sleep(t.arrivalTimeoutMs).then(() => null),
          ]);
          if (settled === null)
            fail(`publish with an aborted signal did not settle within ${t.arrivalTimeoutMs} ms`);
          const claimed = batch.filter((_, i) => settled.outcomes[i]?.ok === true);
          // Reporting a message published that the broker never got would lose it.
          await arrivals(
            fixture,
            claimed.map((r) => r.messageId),
            t,
          );
        }),
    },
    {
      name: 'ping resolves while the broker is up',
      run: (target) =>
        withFixture(target, async ({ publisher }) => {
          if (publisher.ping === undefined) return;
          await publisher.ping(live());
        }),
    },
  ];
}
