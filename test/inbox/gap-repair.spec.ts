import { connect as amqpConnect, type ConsumeMessage } from 'amqplib';
import {
  OUTBOX_HEADER_SEQUENCE,
  type OutboxPublisher,
  type OutboxRecord,
  type PublishOutcome,
} from '../../lib';
import { OutboxAuditStore } from '../../lib/admin';
import { OutboxGapRepairModule } from '../../lib/operations/gap-repair';
import {
  ensureInboxTable,
  httpGapRepairClient,
  Inbox,
  inboxTableDropDdl,
  messageIdFromAmqp,
  sequenceOf,
  type GapRepairAnswer,
  type GapRepairRequest,
  type SequenceStatus,
} from '../../lib/inbox';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { outboxDialectOf } from '../../lib/store/schema/outbox-table-ddl';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import { TEST_DATABASES, uniqueTable } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';
import { RABBITMQ_URL } from '../support/transports/native-consumers';
import { waitFor } from '../support/wait-for';

// Gap repair end to end on each database, through RabbitMQ: a publisher that silently loses
// every 40th message it is handed (re-sent copies included) between a producer numbering its
// keys and a consumer whose inbox holds a message until its predecessor is handled. The
// consumer asks the producer's HTTP route for what is missing, and every key arrives complete
// and in order with no operator step; a run that loses nothing asks nothing.

const TOKEN = 'gap-repair-test-token';
const CLOSING = 'test.closing';

/**
 * Answers every 40th message it is handed as published without sending it (a broker that
 * acknowledged and lost it). The last message of each key (type `test.closing`) is spared: a gap
 * guard sees a loss only when a later message of its key arrives (docs/gap-repair.md, limits).
 */
class LosingPublisher implements OutboxPublisher {
  /** `key:number` of each message lost, copies included. */
  readonly lost: string[] = [];
  private handed = 0;

  constructor(
    private readonly inner: RabbitMqPublisher,
    private readonly every: number | null,
  ) {}

  async publish(messages: readonly OutboxRecord[], signal: AbortSignal): Promise<PublishOutcome[]> {
    const kept: OutboxRecord[] = [];
    const losing = new Set<OutboxRecord>();
    for (const m of messages) {
      this.handed += 1;
      if (this.every !== null && this.handed % this.every === 0 && m.type !== CLOSING) {
        losing.add(m);
        this.lost.push(`${m.key}:${m.headers[OUTBOX_HEADER_SEQUENCE]}`);
      } else kept.push(m);
    }
    const outcomes = kept.length === 0 ? [] : [...(await this.inner.publish(kept, signal))];
    return messages.map((m) => (losing.has(m) ? { ok: true } : (outcomes.shift() ?? { ok: true })));
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}

for (const db of TEST_DATABASES) {
  describeWith(
    [...(db.service === null ? [] : [db.service]), 'rabbitmq'],
    `gap repair end to end on ${db.name}`,
    () => {
      const scope = useOutboxScope(db, { tablePrefix: 'outbox_gre' });

      async function run(
        every: number | null,
        {
          holdMs = 20_000,
          deleteAtSettle = false,
        }: { holdMs?: number; deleteAtSettle?: boolean } = {},
      ) {
        const queue = uniqueTable('outbox_gre_q');
        const connection = await amqpConnect(RABBITMQ_URL);
        scope.defer(() => connection.close());
        const channel = await connection.createChannel();
        await channel.assertQueue(queue, { durable: false });

        const auditTable = { tableName: uniqueTable('outbox_gre_aud') };
        const audit = new OutboxAuditStore(typeormSqlPort(scope.ds), auditTable);
        await audit.ensure();
        scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS ${audit.names.table}`));

        const publisher = new LosingPublisher(new RabbitMqPublisher({ url: RABBITMQ_URL }), every);
        const producer = await scope.open({
          publisher,
          http: true,
          imports: [
            OutboxGapRepairModule.forRoot({
              authorize: (request) => request.headers.authorization === `Bearer ${TOKEN}`,
              auditTable,
              ratePerSecond: 50,
            }),
          ],
          options: {
            autoStart: true,
            ordering: { sequence: true },
            dispatcher: { listen: false, pollIntervalMs: 20 },
            ...(deleteAtSettle ? { cleaner: { deliveredRetentionMs: 0 } } : {}),
          },
        });

        const inboxTable = uniqueTable('outbox_gre_in');
        await ensureInboxTable(scope.ds, { tableName: inboxTable });
        scope.defer(async () => {
          for (const sql of inboxTableDropDdl(outboxDialectOf(scope.ds.options.type), {
            tableName: inboxTable,
          })) {
            await scope.ds.query(sql);
          }
        });
        const http = httpGapRepairClient({
          url: `${producer.http?.url ?? ''}/outbox/gap-repair`,
          headers: { authorization: `Bearer ${TOKEN}` },
        });
        const asked: { request: GapRepairRequest; answer: GapRepairAnswer }[] = [];
        const failures: unknown[] = [];
        const inbox = new Inbox(scope.ds, {
          tableName: inboxTable,
          sequence: {
            onGap: 'hold',
            holdMs,
            repair: {
              client: http,
              topic: queue,
              afterMs: 200,
              retryMs: 1_000,
              onAnswer: (request, answer) => asked.push({ request, answer }),
              onError: (_request, error) => failures.push(error),
            },
          },
        });

        // What the handlers saw, per key, in the order their transactions ran.
        const seen = new Map<string, [number, SequenceStatus][]>();
        const handling = new Set<Promise<void>>();
        let stopped = false;
        await channel.prefetch(200);
        await channel.consume(queue, (message: ConsumeMessage | null) => {
          if (message === null) return;
          const sequence = sequenceOf(message);
          const done = inbox
            .handleOnce(
              scope.ds,
              { consumer: 'billing', messageId: messageIdFromAmqp(message), sequence },
              (_manager, context) => {
                if (sequence !== null && context.sequence !== undefined) {
                  const list = seen.get(sequence.key) ?? [];
                  list.push([sequence.sequence, context.sequence.status]);
                  seen.set(sequence.key, list);
                }
                return Promise.resolve();
              },
            )
            .then(
              () => {
                if (!stopped) channel.ack(message);
              },
              (error: unknown) => {
                failures.push(error);
                if (!stopped) channel.nack(message, false, false);
              },
            )
            .finally(() => handling.delete(done));
          handling.add(done);
        });
        scope.defer(async () => {
          stopped = true;
          await channel.deleteQueue(queue);
          await channel.close();
          await Promise.all([...handling]);
        });

        // 8 keys, 30 messages each, one transaction per round of keys, then a closing message
        // per key.
        const keys = Array.from({ length: 8 }, (_, i) => `order-${i}`);
        const perKey = 30;
        for (let n = 1; n <= perKey; n++) {
          await producer.enqueue(
            keys.map((key) => ({ topic: queue, key, type: 'order.changed', payload: { n } })),
          );
        }
        await producer.enqueue(
          keys.map((key) => ({ topic: queue, key, type: CLOSING, payload: { n: perKey + 1 } })),
        );
        const complete = Array.from({ length: perKey + 1 }, (_, i) => i + 1);
        await waitFor(
          'every key handled to its closing message',
          () => keys.every((key) => seen.get(key)?.some(([n]) => n === perKey + 1) === true),
          { timeoutMs: 60_000, intervalMs: 100 },
        );
        return { keys, seen, complete, asked, failures, publisher, audit };
      }

      it('a publisher that loses every 40th message: every key complete and in order, no operator step', async () => {
        const { keys, seen, complete, asked, failures, publisher, audit } = await run(40);
        expect(publisher.lost.length).toBeGreaterThanOrEqual(6);
        for (const key of keys) {
          expect(seen.get(key)?.map(([n]) => n)).toEqual(complete);
          expect(seen.get(key)?.every(([, status]) => status === 'next')).toBe(true);
        }
        expect(failures).toEqual([]);
        // Exactly what was lost was re-sent: each lost number (a lost copy is asked for again).
        const resent = new Set(
          asked.flatMap(({ request, answer }) => answer.resent.map((n) => `${request.key}:${n}`)),
        );
        expect([...resent].sort()).toEqual([...new Set(publisher.lost)].sort());
        expect(asked.every(({ answer }) => answer.gone.length === 0)).toBe(true);
        const entries = await audit.recent(100, 'redrive');
        expect(entries.length).toBeGreaterThan(0);
        expect(
          entries.every((e) => e.scope === 'gap-repair' && e.actor === 'gap-repair:billing'),
        ).toBe(true);
      });

      it('asks nothing when nothing was lost', async () => {
        const { keys, seen, complete, asked, failures, audit } = await run(null);
        for (const key of keys) expect(seen.get(key)?.map(([n]) => n)).toEqual(complete);
        expect(asked).toEqual([]);
        expect(failures).toEqual([]);
        expect(await audit.recent(10)).toEqual([]);
      });

      it('numbers the producer no longer has are answered gone, and the held message goes on as a gap at once', async () => {
        // Delivered rows are deleted at settle: a lost message is gone. The hold is 10 minutes,
        // far past the wait below, so the keys finish only because the gone answers end it.
        const { keys, seen, complete, asked, failures, publisher } = await run(40, {
          deleteAtSettle: true,
          holdMs: 600_000,
        });
        const lost = new Set(publisher.lost);
        expect(lost.size).toBeGreaterThanOrEqual(6);
        for (const key of keys) {
          const expected = complete
            .filter((n) => !lost.has(`${key}:${n}`))
            .map((n) => [n, lost.has(`${key}:${n - 1}`) ? 'gap' : 'next']);
          expect(seen.get(key)).toEqual(expected);
        }
        const gone = new Set(
          asked.flatMap(({ request, answer }) => answer.gone.map((n) => `${request.key}:${n}`)),
        );
        expect([...gone].sort()).toEqual([...lost].sort());
        expect(asked.every(({ answer }) => answer.resent.length === 0)).toBe(true);
        expect(failures).toEqual([]);
      });
    },
  );
}
