import { Test, type TestingModule } from '@nestjs/testing';
import { ensureInboxTable, Inbox, messageIdFromKafka } from 'nestjs-outbox/inbox';
import { pgOutbox, type PgPoolClient } from 'nestjs-outbox/pg';
import type { DataSource } from 'typeorm';
import {
  getOutboxToken,
  OutboxAdmin,
  OutboxCleaner,
  OutboxDispatcher,
  OutboxExternalDeliveryError,
  OutboxModule,
  OutboxService,
  type OutboxMessage,
} from '../../lib';
import { debeziumConnectorConfig, type DebeziumConnectorDefinition } from '../../lib/debezium';
import { KafkaPublisher } from 'nestjs-outbox/kafka';
import { runOutboxCli } from '../../lib/operations/cli/outbox-cli';
import { pgPool, type PgPoolForTests } from '../connections/driver-targets';
import { serverConnection, testDatabase, uniqueTable } from '../support/databases';
import {
  collectTopics,
  createConnector,
  deleteConnector,
  expectConnectRunning,
  KAFKA_BROKERS,
  type ReceivedRecord,
} from '../support/kafka-connect';
import { describeWith } from '../support/services';
import { sleep, waitFor } from '../support/wait-for';

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

/** The connector as `outbox cdc debezium` prints it, with the password a secret store would add. */
async function connectorFromCli(table: string): Promise<DebeziumConnectorDefinition> {
  const c = serverConnection('postgres');
  let stdout = '';
  const code = await runOutboxCli(
    [
      'cdc',
      'debezium',
      '--connector',
      'postgres',
      '--table',
      table,
      '--name',
      `dbz-it-${table}`,
      '--topic-prefix',
      `dbz_it_${table}`,
      '--slot',
      table,
      '--start-with',
      'undelivered',
      '--json',
    ],
    { DATABASE_URL: `postgres://${c.username}@${c.host}:${c.port}/${c.database}` },
    { stdout: (text) => (stdout += text), stderr: (text) => (stdout += text) },
  );
  expect(code).toBe(0);
  const printed = JSON.parse(stdout) as DebeziumConnectorDefinition;
  return { ...printed, config: { ...printed.config, 'database.password': c.password ?? '' } };
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
      beforeConnector?: (table: string) => Promise<void>,
    ): Promise<{ table: string; connector: DebeziumConnectorDefinition }> {
      const table = uniqueTable(`dbz_${run}`);
      ds = await db.open(table);
      cleanups.push(() => db.close(ds, table));
      await beforeConnector?.(table);
      const connector = startWith === 'new' ? connectorFor(table) : await connectorFromCli(table);
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

    /** The app before the cut-over: the module's dispatcher publishing to the same broker. */
    async function openDispatcherApp(table: string): Promise<TestingModule> {
      const publisher = new KafkaPublisher({ brokers: KAFKA_BROKERS, clientId: `dbz-it-${run}` });
      const moduleRef = await Test.createTestingModule({
        imports: [
          OutboxModule.forRoot({ dataSource: ds, tableName: table, publisher, autoStart: false }),
        ],
      }).compile();
      await moduleRef.init();
      cleanups.push(async () => {
        await moduleRef.close();
        await publisher.close();
      });
      return moduleRef;
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
      // So does the command, told the app's delivery.
      const c = serverConnection('postgres');
      const url = `postgres://${c.username}${c.password ? `:${c.password}` : ''}@${c.host}:${c.port}/${c.database}`;
      for (const argv of [['why', committed[0]?.messageId as string], ['stats']]) {
        let out = '';
        const code = await runOutboxCli(
          [...argv, '--table', table, '--delivery', 'external'],
          { DATABASE_URL: url },
          { stdout: (text) => (out += text), stderr: (text) => (out += text) },
        );
        expect({ code, out }).toEqual({
          code: 0,
          out: expect.stringMatching(/external \(Debezium\)/),
        });
      }
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

    /** Enqueues `count` messages per key in transactions of their own (TypeORM), in key order. */
    async function enqueueRounds(
      outbox: OutboxService,
      topic: string,
      from: number,
      count: number,
    ): Promise<string[]> {
      const ids: string[] = [];
      for (let i = from; i < from + count; i++) {
        for (const key of KEYS) {
          ids.push(
            await ds.transaction((manager) =>
              outbox.enqueue({ topic, key, type: 't', payload: { seq: i, key } }, manager),
            ),
          );
        }
      }
      return ids;
    }

    /** Every id on the topic exactly once, and each key's messages in `seq` order in one partition. */
    function expectOnceInOrder(records: readonly ReceivedRecord[], ids: readonly string[]): void {
      const seen = records.map((r) => r.headers['x-outbox-message-id']);
      expect([...seen].sort()).toEqual([...ids].sort());
      for (const key of KEYS) {
        const ofKey = records.filter((r) => r.key === key);
        expect(new Set(ofKey.map((r) => r.partition)).size).toBe(1);
        expect([...ofKey].sort((a, b) => a.offset - b.offset).map(seq)).toEqual(
          ofKey.map(seq).sort((a, b) => a - b),
        );
      }
    }

    it('cut-over from the dispatcher: what it delivered is not repeated, what it had not is sent once, in key order', async () => {
      let topic = '';
      let records: ReceivedRecord[] = [];
      const ids: string[] = [];
      const { table } = await openTable('undelivered', async (t) => {
        topic = `dbz-it-${t}`;
        records = await collect([topic]);
        // Before: the module's dispatcher delivers the first messages; then it stops (the apps are
        // redeployed with delivery 'external') with the next ones still pending.
        const before = await openDispatcherApp(t);
        const outbox = before.get(OutboxService);
        ids.push(...(await enqueueRounds(outbox, topic, 1, 4)));
        await before.get(OutboxDispatcher).drain();
        ids.push(...(await enqueueRounds(outbox, topic, 5, 3)));
        await before.close();
      });
      // After: Debezium, registered with --start-with undelivered, sends the pending rows, then
      // every new one.
      const app = await openApp(table);
      ids.push(...(await enqueueRounds(app.get(OutboxService), topic, 8, 3)));
      await waitFor(`${ids.length} messages`, () => records.length >= ids.length, {
        timeoutMs: 60_000,
        intervalMs: 250,
      });
      // Anything repeated would arrive with the rest: give it the time a poll takes.
      await sleep(2_000);
      expectOnceInOrder(records, ids);
    });

    it('cut-back to the dispatcher: a short write lock, the slot caught up, the rows marked delivered', async () => {
      const { table, connector } = await openTable('new');
      const topic = `dbz-it-${table}`;
      const records = await collect([topic]);
      const app = await openApp(table);
      const external = app.get(OutboxService);
      const ids = await enqueueRounds(external, topic, 1, 4);

      // The procedure of docs/debezium.md, in an operator's session.
      const operator = await pool.connect();
      let late: Promise<string> = Promise.resolve('');
      try {
        await operator.query('BEGIN');
        await operator.query(`LOCK TABLE "${table}" IN EXCLUSIVE MODE`);
        // An enqueue of the app meanwhile waits for the lock, and goes to the dispatcher.
        late = ds.transaction((manager) =>
          external.enqueue(
            { topic, key: 'k1', type: 't', payload: { seq: 5, key: 'k1' } },
            manager,
          ),
        );
        const { rows } = await operator.query('SELECT pg_current_wal_lsn()::text AS lsn');
        const lsn = (rows as { lsn: string }[])[0]?.lsn;
        await waitFor(
          'the slot to confirm the position of the lock',
          async () => {
            const { rows: slot } = await operator.query(
              'SELECT confirmed_flush_lsn >= $2::pg_lsn AS caught FROM pg_replication_slots WHERE slot_name = $1',
              [table, lsn],
            );
            return (slot as { caught: boolean }[])[0]?.caught === true;
          },
          { timeoutMs: 90_000, intervalMs: 500 },
        );
        await operator.query(
          `UPDATE "${table}" SET status = 'delivered', delivered_at = now() WHERE status IN ('pending', 'waiting')`,
        );
        await deleteConnector(connector.name);
        await operator.query('COMMIT');
      } finally {
        operator.release();
      }
      ids.push(await late);

      // After: the module's dispatcher delivers what was written since, and nothing before.
      const after = await openDispatcherApp(table);
      ids.push(...(await enqueueRounds(after.get(OutboxService), topic, 6, 2)));
      await after.get(OutboxDispatcher).drain();
      await waitFor(`${ids.length} messages`, () => records.length >= ids.length, {
        timeoutMs: 60_000,
        intervalMs: 250,
      });
      await sleep(2_000);
      expectOnceInOrder(records, ids);
    });
  },
);
