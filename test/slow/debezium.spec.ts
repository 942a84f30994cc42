import { Test, type TestingModule } from '@nestjs/testing';
import { ensureInboxTable, Inbox, messageIdFromKafka } from 'nestjs-outbox/inbox';
import { pgOutbox, type PgPoolClient } from 'nestjs-outbox/pg';
import type { DataSource } from 'typeorm';
import {
  debeziumConnectorConfig,
  getOutboxToken,
  OutboxAdmin,
  OutboxCleaner,
  OutboxDispatcher,
  OutboxExternalDeliveryError,
  OutboxModule,
  OutboxService,
  type DebeziumConnectorDefinition,
  type OutboxMessage,
} from '../../lib';
import { pgPool, type PgPoolForTests } from '../orm/driver-targets';
import { serverConnection, testDatabase, uniqueTable } from '../support/databases';
import {
  collectTopics,
  createConnector,
  deleteConnector,
  expectConnectRunning,
  type ReceivedRecord,
} from '../support/kafka-connect';
import { describeWith } from '../support/services';
import { waitFor } from '../support/wait-for';

// PostgreSQL → Debezium's PostgreSQL connector with the outbox event router on a real Kafka Connect
// worker (scripts/kafka-connect.sh) → a real Kafka broker → a kafkajs consumer. The app enqueues
// through OutboxModule with delivery 'external', on TypeORM and on node-postgres (pgOutbox); every
// test asserts what reached the topics and what is in the table.

jest.setTimeout(180_000);

const db = testDatabase('postgres');
const run = `${process.pid}_${Date.now() % 1_000_000}`;
const KEYS = ['k1', 'k2', 'k3'];

/** The connector for `table`, with names of this run (slot, publication, topic prefix). */
function connectorFor(table: string, startWith: 'new' | 'undelivered' = 'new') {
  const c = serverConnection('postgres');
  return debeziumConnectorConfig({
    connector: 'postgres',
    database: {
      hostname: c.host,
      port: c.port,
      user: c.username,
      password: c.password ?? '',
      dbname: c.database,
    },
    tableName: table,
    name: `dbz-it-${table}`,
    topicPrefix: `dbz_it_${table}`,
    slotName: table,
    publicationName: table,
    startWith,
  });
}

/** The payload's sequence number, for the order checks. */
function seq(record: ReceivedRecord): number {
  return (JSON.parse(record.value ?? 'null') as { seq: number }).seq;
}

describeWith(
  ['postgres', 'kafka'],
  'Debezium delivers the outbox (PostgreSQL → Kafka Connect → Kafka)',
  () => {
    let ds: DataSource;
    let pool: PgPoolForTests;
    const cleanups: (() => Promise<void>)[] = [];

    beforeAll(async () => {
      await expectConnectRunning();
      pool = pgPool(4);
    });

    afterEach(async () => {
      for (const cleanup of cleanups.splice(0).reverse()) {
        await cleanup().catch((error: unknown) => console.error('cleanup failed:', error));
      }
    });

    afterAll(async () => {
      await pool?.end();
    });

    async function slotActive(slot: string): Promise<boolean> {
      const rows = await ds.query<{ n: number }[]>(
        `SELECT count(*)::int AS n FROM pg_replication_slots WHERE slot_name = $1 AND active`,
        [slot],
      );
      return rows[0]?.n === 1;
    }

    /** A table, a connector on it and, after the test, none of them (nor the slot). */
    async function openTable(
      startWith: 'new' | 'undelivered' = 'new',
      beforeConnector?: (ds: DataSource, table: string) => Promise<void>,
    ): Promise<{ table: string; connector: DebeziumConnectorDefinition }> {
      const table = uniqueTable(`dbz_${run}`);
      ds = await db.open(table);
      cleanups.push(() => db.close(ds, table));
      await beforeConnector?.(ds, table);
      const connector = connectorFor(table, startWith);
      // A slot left behind retains WAL for ever: dropped even if the test failed half-way.
      cleanups.push(async () => {
        await deleteConnector(connector.name);
        await waitFor(`slot ${table} released`, async () => !(await slotActive(table)), {
          timeoutMs: 30_000,
          intervalMs: 200,
        });
        await ds.query(
          `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`,
          [table],
        );
        await ds.query(`DROP PUBLICATION IF EXISTS "${table}"`);
      });
      await createConnector(connector);
      // Streaming has begun once the connector holds its slot: rows committed from now on are its.
      await waitFor(`slot ${table} active`, () => slotActive(table), {
        timeoutMs: 60_000,
        intervalMs: 200,
      });
      return { table, connector };
    }

    /** The app: two outbox instances on one table, TypeORM (default) and node-postgres ('pg'). */
    async function openApp(table: string): Promise<TestingModule> {
      const moduleRef = await Test.createTestingModule({
        imports: [
          OutboxModule.forRoot({
            dataSource: ds,
            tableName: table,
            delivery: 'external',
            autoStart: false,
            cleaner: { deliveredRetentionMs: 0 },
          }),
          OutboxModule.forRoot({
            name: 'pg',
            connection: pgOutbox(pool),
            tableName: table,
            delivery: 'external',
            autoStart: false,
          }),
        ],
      }).compile();
      await moduleRef.init();
      cleanups.push(() => moduleRef.close());
      return moduleRef;
    }

    async function collect(topics: readonly string[]) {
      const collected = await collectTopics(topics, `dbz-it-${run}-${topics[0] ?? ''}`);
      cleanups.push(collected.stop);
      return collected.records;
    }

    it('delivers every committed message, none rolled back, in order per key, with the documented headers; the inbox drops the duplicates', async () => {
      const { table } = await openTable();
      const app = await openApp(table);
      const typeorm = app.get(OutboxService);
      const pg = app.get<OutboxService<PgPoolClient>>(getOutboxToken('pg', OutboxService));
      const topics = [`dbz-it-${table}-a`, `dbz-it-${table}-b`];
      const records = await collect(topics);

      const committed: OutboxMessage[] = [];
      const ghosts = new Set<string>();
      let n = 0;
      const message = (key: string): OutboxMessage => {
        n += 1;
        return {
          topic: topics[n % 2] as string,
          key,
          type: 'order.created',
          payload: { seq: n, key, text: 'grüße' },
          headers: { tenant: `t-${n}`, 'x-trace': 'abc' },
        };
      };
      for (let round = 0; round < 10; round++) {
        for (const key of KEYS) {
          const viaTypeorm = message(key);
          await ds.transaction(async (manager) => {
            const id = await typeorm.enqueue(viaTypeorm, manager);
            committed.push({ ...viaTypeorm, messageId: id });
          });
          const viaPg = message(key);
          const client = await pool.connect();
          try {
            await client.query('BEGIN');
            const id = await pg.enqueue(viaPg, client);
            await client.query('COMMIT');
            committed.push({ ...viaPg, messageId: id });
          } finally {
            client.release();
          }
          // Rolled back: in the log as an aborted transaction, never on a topic.
          const ghost = { ...message(key), payload: { seq: -1, ghost: true } };
          await ds
            .transaction(async (manager) => {
              const id = await typeorm.enqueue(ghost, manager);
              ghosts.add(id);
              throw new Error('rolled back on purpose');
            })
            .catch(() => undefined);
        }
      }

      const expected = new Map(committed.map((m) => [m.messageId as string, m]));
      await waitFor(
        `${expected.size} committed messages on the topics`,
        () =>
          new Set(records.map((r) => r.headers['x-outbox-message-id'])).size >= expected.size &&
          [...expected.keys()].every((id) =>
            records.some((r) => r.headers['x-outbox-message-id'] === id),
          ),
        { timeoutMs: 60_000, intervalMs: 250 },
      );

      // None rolled back; every one committed, with its topic, key, payload and headers.
      for (const record of records) {
        const id = record.headers['x-outbox-message-id'] as string;
        expect(ghosts.has(id)).toBe(false);
        const sent = expected.get(id);
        expect(sent).toBeDefined();
        expect(record.topic).toBe(sent?.topic);
        expect(record.key).toBe(sent?.key);
        expect(JSON.parse(record.value ?? 'null')).toEqual(sent?.payload);
        expect(record.headers['x-outbox-type']).toBe('order.created');
        // The message's headers arrive as one header, their JSON object.
        expect(JSON.parse(record.headers['x-outbox-headers'] ?? 'null')).toEqual(sent?.headers);
      }
      // Per key: one partition, in commit order.
      for (const key of KEYS) {
        for (const topic of topics) {
          const ofKey = records.filter((r) => r.key === key && r.topic === topic);
          expect(new Set(ofKey.map((r) => r.partition)).size).toBe(1);
          const inOffsetOrder = [...ofKey].sort((a, b) => a.offset - b.offset).map(seq);
          expect(inOffsetOrder).toEqual([...inOffsetOrder].sort((a, b) => a - b));
        }
      }

      // The inbox on the records Debezium produced, each delivered twice (a connector restart
      // replays): every message handled once.
      const inboxTable = `${table}_inbox`;
      await ensureInboxTable(ds, { tableName: inboxTable });
      cleanups.push(async () => {
        await ds.query(`DROP TABLE IF EXISTS "${inboxTable}"`);
      });
      const inbox = new Inbox(ds, { tableName: inboxTable });
      const handled: string[] = [];
      for (const record of [...records, ...records]) {
        const messageId = messageIdFromKafka({
          headers: { 'x-outbox-message-id': record.headers['x-outbox-message-id'] },
        });
        await inbox.handleOnce(ds, { consumer: 'billing', messageId }, () => {
          handled.push(messageId);
          return Promise.resolve();
        });
      }
      expect(handled.sort()).toEqual([...expected.keys()].sort());

      // Admin and the dispatcher say delivery is external; the cleaner removes rows by age.
      const admin = app.get(OutboxAdmin);
      const why = await admin.why(committed[0]?.messageId as string);
      expect(why.state).toBe('external');
      expect(why.reason).toMatch(/delivery is external \(Debezium\)/);
      await expect(app.get(OutboxDispatcher).runOnce()).rejects.toBeInstanceOf(
        OutboxExternalDeliveryError,
      );
      const before = records.length;
      const report = await app.get(OutboxCleaner).runOnce();
      expect(report.expired).toBe(expected.size);
      expect(await ds.query(`SELECT count(*)::int AS n FROM "${table}"`)).toEqual([{ n: 0 }]);
      // The deletes are not messages: nothing more reaches the topics (a marker proves the
      // connector has read past them).
      const marker = message('marker');
      await ds.transaction((manager) => typeorm.enqueue(marker, manager));
      await waitFor('the marker', () => records.some((r) => r.key === 'marker'), {
        timeoutMs: 30_000,
        intervalMs: 250,
      });
      expect(records.length).toBe(before + 1);
    });
  },
);
