import { randomUUID } from 'node:crypto';
import { Test, type TestingModule } from '@nestjs/testing';
import {
  OutboxModule,
  OutboxService,
  type OutboxPublisher,
  type OutboxRecord,
  type PublishOutcome,
} from '../../lib';
import { type OutboxConnection } from '../../lib/testing';
import { pgOutbox } from '../../lib/connections/pg';
import { mysql2Outbox } from '../../lib/connections/mysql2';
import { createOutboxTable, outboxTableDropDdl } from '../../lib/store/schema/outbox-table-ddl';
import {
  MYSQL_OWNER_LOCK_PREFIX,
  POSTGRES_OWNER_LOCK_CLASS,
} from '../../lib/store/shared-sql/owner-leases';
import { uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';
import { waitFor } from '../support/wait-for';
import { mariadbPool, pgPool } from './driver-targets';

// Fast takeover after a crash (ARCHITECTURE.md, "Takeover after a crash") on the connections of
// node-postgres and mysql2, not only TypeORM's: the dispatcher holds an owner lock on a session
// of the connection's own and writes lease tokens that name it (UUID version 8, the lock's key
// first), which is what lets another dispatcher give a dead one's leases back at once. The
// takeover itself is proven with SIGKILLed processes in dispatcher-faults.spec.ts.

/** Holds every publish until `release()`: the row stays leased while the test reads it. */
class GatedPublisher implements OutboxPublisher {
  readonly sent: string[] = [];
  private open!: () => void;
  private readonly gate = new Promise<void>((resolve) => (this.open = resolve));

  async publish(messages: readonly OutboxRecord[]): Promise<readonly PublishOutcome[]> {
    await this.gate;
    this.sent.push(...messages.map((m) => m.messageId));
    return messages.map(() => ({ ok: true }) as const);
  }

  release(): void {
    this.open();
  }
}

interface Target {
  readonly name: string;
  readonly service: 'postgres' | 'mariadb';
  readonly dialect: 'postgres' | 'mysql';
  open(): {
    connection: OutboxConnection<unknown>;
    query(sql: string, params?: unknown[]): Promise<Record<string, unknown>[]>;
    enqueue(outbox: OutboxService<unknown>, topic: string): Promise<void>;
    end(): Promise<void>;
  };
  /** Whether the owner lock that `token` names is held by some session. */
  lockHeld(
    query: (sql: string, params?: unknown[]) => Promise<Record<string, unknown>[]>,
    token: string,
  ): Promise<boolean>;
}

const TARGETS: Target[] = [
  {
    name: 'node-postgres',
    service: 'postgres',
    dialect: 'postgres',
    open() {
      const pool = pgPool(6);
      return {
        connection: pgOutbox(pool),
        query: async (sql, params) =>
          (await pool.query(sql, params)).rows as Record<string, unknown>[],
        async enqueue(outbox, topic) {
          const client = await pool.connect();
          try {
            await client.query('BEGIN');
            await outbox.enqueue({ topic, payload: { n: 1 } }, client);
            await client.query('COMMIT');
          } finally {
            client.release();
          }
        },
        end: () => pool.end(),
      };
    },
    async lockHeld(query, token) {
      const rows = await query(
        `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted
         AND classid = $1::oid AND objid = $2::oid AND objsubid = 2`,
        [POSTGRES_OWNER_LOCK_CLASS, Number.parseInt(token.slice(0, 8), 16)],
      );
      return Number(rows[0]?.['n']) === 1;
    },
  },
  {
    name: 'mysql2',
    service: 'mariadb',
    dialect: 'mysql',
    open() {
      const pool = mariadbPool(6);
      return {
        connection: mysql2Outbox(pool),
        query: async (sql, params) =>
          (await pool.query(sql, params))[0] as Record<string, unknown>[],
        async enqueue(outbox, topic) {
          const connection = await pool.getConnection();
          try {
            await connection.beginTransaction();
            await outbox.enqueue({ topic, payload: { n: 1 } }, connection);
            await connection.commit();
          } finally {
            connection.release();
          }
        },
        end: () => pool.end(),
      };
    },
    async lockHeld(query, token) {
      const rows = await query('SELECT IS_USED_LOCK(?) IS NOT NULL AS held', [
        `${MYSQL_OWNER_LOCK_PREFIX}${token.slice(0, 8)}`,
      ]);
      return Number(rows[0]?.['held']) === 1;
    },
  },
];

for (const target of TARGETS) {
  describeWith([target.service], `owner lock on a ${target.name} connection`, () => {
    async function leaseToken(ownerLock: boolean, check: (token: string, held: boolean) => void) {
      const db = target.open();
      const table = uniqueTable('outbox_owner');
      await createOutboxTable(db.connection.sql, { tableName: table });
      const publisher = new GatedPublisher();
      let moduleRef: TestingModule | undefined;
      try {
        moduleRef = await Test.createTestingModule({
          imports: [
            OutboxModule.forRoot({
              connection: db.connection,
              publisher,
              tableName: table,
              dispatcher: { pollIntervalMs: 100, ownerLock },
            }),
          ],
        }).compile();
        await moduleRef.init();
        const topic = `owner-${randomUUID()}`;
        await db.enqueue(moduleRef.get<OutboxService<unknown>>(OutboxService), topic);
        const q = target.dialect === 'mysql' ? `\`${table}\`` : `"${table}"`;
        const token = await waitFor('the message leased', async () => {
          const rows = await db.query(`SELECT lock_token FROM ${q} WHERE lock_token IS NOT NULL`);
          return rows[0]?.['lock_token'] as string | undefined;
        });
        check(token, await target.lockHeld(db.query, token));
        publisher.release();
        await waitFor('the message published', () => publisher.sent.length === 1);
        await moduleRef.close();
        moduleRef = undefined;
        if (ownerLock) expect(await target.lockHeld(db.query, token)).toBe(false);
      } finally {
        publisher.release();
        await moduleRef?.close();
        for (const statement of outboxTableDropDdl(target.dialect, { tableName: table })) {
          await db.query(statement);
        }
        await db.end();
      }
    }

    it('leases under an owner lock its session holds, released at shutdown', () =>
      leaseToken(true, (token, held) => {
        // UUID version 8 at its place: a token that names its owner's lock.
        expect(token[14]).toBe('8');
        expect(held).toBe(true);
      }));

    it('with ownerLock: false, holds no connection for a lock and leases with plain tokens', () =>
      leaseToken(false, (token) => expect(token[14]).toBe('4')));
  });
}
