import { connect, type ChannelModel } from 'amqplib';
import type { OutboxMessage, OutboxRecord } from '../../lib';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { testDatabase } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith, SERVICES } from '../support/services';
import { expectNever, waitFor } from '../support/wait-for';
import { CLAIM_LOOP } from '../support/test-claims';

// A dispatcher whose process is paused (SIGSTOP, a long GC) between its lease check and the
// socket write: on waking, the timers that abort its publish have not fired yet, and the promise
// jobs queued before the pause run first. It must send nothing once its lease is over; another
// dispatcher delivers the batch, each message once. The freeze is real (Atomics.wait blocks the
// event loop), on PostgreSQL and RabbitMQ.

const RABBITMQ_URL = `amqp://${process.env.RABBITMQ_USER ?? 'guest'}:${process.env.RABBITMQ_PASSWORD ?? 'guest'}@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;
const postgres = testDatabase('postgres');
const LEASE_MS = 2_000;

describeWith(
  ['postgres', 'rabbitmq'],
  'a dispatcher paused past its lease (postgres, RabbitMQ)',
  () => {
    // A lease outlived by a frozen process: the claim loop's (partitions: partitions.spec).
    const scope = useOutboxScope(postgres, { tablePrefix: 'outbox_freeze', options: CLAIM_LOOP });
    const queue = `outbox-it-freeze-${process.pid}`;
    let consumer: ChannelModel | undefined;

    beforeAll(async () => {
      consumer = await connect(RABBITMQ_URL);
    });
    afterAll(async () => {
      const ch = await consumer?.createChannel();
      await ch?.deleteQueue(queue).catch(() => undefined);
      await consumer?.close().catch(() => undefined);
    });

    const publisher = (onRoute: (record: OutboxRecord) => void): RabbitMqPublisher =>
      new RabbitMqPublisher({
        url: RABBITMQ_URL,
        assertTopology: async (channel) => {
          await channel.assertQueue(queue, { durable: false });
        },
        routingKey: (record) => {
          onRoute(record);
          return queue;
        },
      });

    const msg = (key: string, n: number): OutboxMessage => ({
      topic: 'ledger',
      type: 'entry',
      key,
      payload: { n },
    });

    it('sends nothing once its lease is over; another dispatcher delivers the batch, each message once', async () => {
      let freezeNext = false;
      const frozen = await scope.open({
        publisher: publisher(() => {
          if (!freezeNext) return;
          freezeNext = false;
          // Between the dispatcher's lease check and the socket write: no timer fires until the
          // lease is over.
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, LEASE_MS + 300);
        }),
        options: { dispatcher: { leaseMs: LEASE_MS, batchSize: 10 } },
      });
      const healthy = await scope.open({
        table: frozen.table,
        publisher: publisher(() => undefined),
        options: { dispatcher: { leaseMs: LEASE_MS, batchSize: 10 } },
      });

      const received: string[] = [];
      const ch = await consumer!.createChannel();
      await ch.assertQueue(queue, { durable: false });
      await ch.consume(queue, (message) => {
        if (message === null) return;
        received.push(String(message.properties.messageId));
        ch.ack(message);
      });

      // A first publish opens the connection and the channel: the frozen one's later publish then
      // reaches the socket without waiting on the network.
      const [warm] = await scope.ds.transaction((m) => frozen.outbox.enqueue([msg('w', 0)], m));
      await frozen.dispatcher.drain();
      await waitFor('the warm-up message consumed', () => received.includes(warm ?? ''));

      const ids = await scope.ds.transaction((m) =>
        frozen.outbox.enqueue([msg('a', 1), msg('b', 2), msg('a', 3)], m),
      );
      freezeNext = true;
      const report = await frozen.dispatcher.runOnce();
      expect(report.claimed).toBe(3);
      expect(report.published).toBe(0);
      await expectNever(
        'a message sent by the paused dispatcher',
        () => (received.length > 1 ? received : false),
        300,
      );
      // Handed back unsent: no attempt counted.
      const held = await frozen.rows();
      expect(held.filter((r) => ids.includes(r.messageId)).map((r) => r.attempts)).toEqual([
        0, 0, 0,
      ]);

      await waitFor(
        'the other dispatcher to deliver the batch',
        async () => {
          await healthy.dispatcher.drain();
          return (await healthy.rows()).every((r) => r.status === 'delivered');
        },
        { timeoutMs: 20_000, intervalMs: 50 },
      );
      await waitFor('the batch consumed', () => received.length >= 4);
      await expectNever('a duplicate', () => (received.length > 4 ? received : false), 300);
      expect([...received].sort()).toEqual([warm, ...ids].sort());
      await ch.close();
    });
  },
);
