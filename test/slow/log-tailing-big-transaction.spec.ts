import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import {
  mysqlLogTailingDdl,
  mysqlLogTailingDrop,
  postgresLogNames,
  postgresLogTailingDdl,
} from 'nestjs-outbox/log-tailing';
import { outboxTableNames } from '../../lib/internal/sql-identifier';
import { DispatcherChild } from '../support/children/spawn-dispatcher';
import { TcpConsumer } from '../support/children/tcp-consumer';
import { serverConnection, TEST_DATABASES, testDatabase } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';
import { waitFor } from '../support/wait-for';

// One outbox transaction far larger than the log reader's heap could hold (issue 60, item 3):
// a backfill that enqueues a message per row. The reader runs in a child process with a small
// heap, as a container with a memory limit would; it must keep reading (the transaction is left
// to the table's sweep past `maxTransactionInserts`) and every message must go out. Before the
// bound, the reader kept every insert until the COMMIT and died of heap exhaustion.

/** The child's old-space limit: the reader with Nest, TypeORM and ts-node fits well under it. */
const HEAP_MB = 160;
/** Inserts in the one transaction: at about 230 bytes each kept, far past `HEAP_MB`. */
const ROWS = 1_000_000;
/** How many of them the test sees delivered (all of them would take the sweep many minutes). */
const BACKFILL_SEEN = 5_000;

interface Target {
  readonly name: 'postgres' | 'mariadb';
  setUp(ds: DataSource, table: string): Promise<void>;
  drop(ds: DataSource, table: string): Promise<void>;
  /** Resolves once the reader reads from a point the big transaction comes after. */
  started(ds: DataSource, table: string): Promise<void>;
  /** Inserts `ROWS` pending outbox rows in one transaction, keys spread over 1 000. */
  insertBig(ds: DataSource, table: string): Promise<void>;
  /** Inserts one pending row with `id`, of a key the big transaction does not use. */
  insertOne(ds: DataSource, table: string, id: string): Promise<void>;
}

const postgres: Target = {
  name: 'postgres',
  async setUp(ds, table) {
    const { publication } = pgNames(table);
    for (const statement of postgresLogTailingDdl(
      outboxTableNames(table, null, 'double'),
      publication,
    )) {
      await ds.query(statement);
    }
  },
  async drop(ds, table) {
    const { slot, publication } = pgNames(table);
    await waitFor('the slot released', async () => {
      const rows: { active: boolean }[] = await ds.query(
        'SELECT active FROM pg_replication_slots WHERE slot_name = $1',
        [slot],
      );
      return rows.every((r) => !r.active);
    });
    await ds.query(
      'SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1',
      [slot],
    );
    await ds.query(`DROP PUBLICATION IF EXISTS "${publication}"`);
  },
  // The slot is made at the app's start, before the child says it is ready.
  started: () => Promise.resolve(),
  async insertBig(ds, table) {
    await ds.query(`INSERT INTO "${table}" (message_id, topic, message_key, event_type, payload)
SELECT gen_random_uuid(), 'backfill', 'key-' || (g % 1000), 'row.touched', '{}'
FROM generate_series(1, ${ROWS}) AS g`);
  },
  async insertOne(ds, table, id) {
    await ds.query(
      `INSERT INTO "${table}" (message_id, topic, message_key, event_type, payload) VALUES ($1, 'after', 'after-key', 'row.touched', '{}')`,
      [id],
    );
  },
};

const mariadb: Target = {
  name: 'mariadb',
  async setUp(ds, table) {
    for (const statement of mysqlLogTailingDdl(outboxTableNames(table, null, 'backtick'))) {
      await ds.query(statement);
    }
  },
  async drop(ds, table) {
    for (const statement of mysqlLogTailingDrop(outboxTableNames(table, null, 'backtick'))) {
      await ds.query(statement);
    }
  },
  async started(ds, table) {
    await waitFor('the reader stored its first position', async () => {
      const rows: unknown[] = await ds.query(
        `SELECT 1 FROM \`${table}_log_position\` WHERE id = 1`,
      );
      return rows.length === 1;
    });
  },
  async insertBig(ds, table) {
    await ds.query(`INSERT INTO \`${table}\` (message_id, topic, message_key, event_type, payload, headers)
SELECT UNHEX(REPLACE(UUID(), '-', '')), 'backfill', CONCAT('key-', seq % 1000), 'row.touched', '{}', '{}'
FROM seq_1_to_${ROWS}`);
  },
  async insertOne(ds, table, id) {
    await ds.query(
      `INSERT INTO \`${table}\` (message_id, topic, message_key, event_type, payload, headers) VALUES (UNHEX(REPLACE(?, '-', '')), 'after', 'after-key', 'row.touched', '{}', '{}')`,
      [id],
    );
  },
};

function pgNames(table: string) {
  return postgresLogNames('public', table, serverConnection('postgres').database);
}

const TARGETS = [postgres, mariadb].filter((t) => TEST_DATABASES.some((db) => db.name === t.name));

for (const target of TARGETS) {
  describeWith([target.name], `a log reader with a ${HEAP_MB} MB heap on ${target.name}`, () => {
    const scope = useOutboxScope(testDatabase(target.name), { tablePrefix: 'bigtx' });

    it(`survives one transaction of ${ROWS} outbox inserts, reads past it and leaves it to the sweep`, async () => {
      const table = await scope.table('bigtx');
      await target.setUp(scope.ds, table);
      scope.defer(() => target.drop(scope.ds, table));
      const consumer = new TcpConsumer();
      await consumer.start();
      scope.defer(() => consumer.stop());
      const reader = await DispatcherChild.start(
        {
          db: target.name,
          table,
          instanceId: 'small-heap-reader',
          tcpPort: consumer.port,
          dispatcher: { batchSize: 1_000, listen: false },
          // The default bound (maxTransactionInserts); the sweep only when the reader wakes it.
          logTailing: { sweepIntervalMs: 3_600_000, standbyRetryMs: 200 },
        },
        60_000,
        [`--max-old-space-size=${HEAP_MB}`],
      );
      scope.defer(() => reader.kill('SIGKILL').catch(() => undefined));
      await target.started(scope.ds, table);

      await target.insertBig(scope.ds, table);
      // Committed after the big one, of a key it does not use: it reaches the consumer through
      // the log only once the reader has read past the whole transaction, alive.
      const after = randomUUID();
      await target.insertOne(scope.ds, table, after);

      let exit: { code: number | null; signal: string | null } | undefined;
      void reader.exited.then((e) => (exit = e));
      const alive = (): void => {
        if (exit !== undefined) {
          throw new Error(`the reader died (${JSON.stringify(exit)}):\n${reader.output}`);
        }
      };
      await waitFor(
        'the message committed after the big transaction, the reader alive',
        () => {
          alive();
          return consumer.ids().includes(after);
        },
        {
          timeoutMs: 600_000,
          intervalMs: 500,
          // What the reader said, should it be alive and stuck.
          describeState: () => `the reader's last output:\n${reader.output.slice(-6_000)}`,
        },
      );
      // The big transaction was left to the table: its rows go out through the sweep. Every one
      // of them once, in key order, is the integration test's (log-tailing.spec, a bound of 50);
      // here, that they flow while the reader lives on.
      await waitFor(
        `${BACKFILL_SEEN} of the big transaction's messages at the consumer, the reader alive`,
        () => {
          alive();
          return consumer.arrivals.length > BACKFILL_SEEN;
        },
        { timeoutMs: 300_000, intervalMs: 500 },
      );
      expect(consumer.duplicates()).toEqual([]);
      await reader.stop(60_000);
    }, 1_200_000);
  });
}
