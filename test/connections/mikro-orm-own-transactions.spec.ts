import type { MikroORM } from '@mikro-orm/core';
import { Test } from '@nestjs/testing';
import {
  OutboxAdmin,
  OutboxDispatcher,
  OutboxModule,
  OutboxService,
  PermanentPublishError,
  type OutboxMessage,
  type OutboxPublisher,
} from '../../lib';
import { mikroOrmOutbox } from '../../lib/connections/mikro-orm';
import {
  createOutboxTable,
  outboxDialectOf,
  outboxTableDropDdl,
} from '../../lib/store/schema/outbox-table-ddl';
import type { OutboxConnection } from '../../lib/store/ports/outbox-connection';
import { uniqueTable } from '../support/databases';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { waitFor } from '../support/wait-for';
import { openMikroOrm, orderSchema } from './mikro-orm-targets';

// The outbox's own work (admin calls, runOnce(), drain()) made while the app's em.transactional()
// is open in the same async context: MikroORM resolves orm.em to the transaction's fork there, so
// a port that went through orm.em.transactional() nested its work into the app's transaction.
// Here the outbox's changes must stand whatever the app's transaction does.

/** Rolls back by throwing out of the callback, the way a MikroORM app does. */
class Rollback extends Error {}

const message = (n: number): OutboxMessage => ({ topic: 'orders', key: `k${n}`, payload: { n } });

for (const database of ['postgres', 'mariadb', 'sqlite'] as const) {
  describeWith(
    database === 'sqlite' ? [] : [database],
    `MikroORM on ${database}: the outbox's work inside the app's em.transactional()`,
    () => {
      const table = uniqueTable('outbox_mikro_own');
      const consumed = uniqueTable('consumed_mikro');
      let orm: MikroORM;
      let connection: OutboxConnection<MikroORM['em']>;
      const closes: (() => Promise<unknown>)[] = [];

      beforeAll(async () => {
        orm = await openMikroOrm(database, consumed);
        connection = mikroOrmOutbox(orm);
        await createOutboxTable(connection.sql, { tableName: table });
        await connection.sql.query(
          `CREATE TABLE ${consumed} (id ${database === 'mariadb' ? 'varchar(64)' : 'text'} PRIMARY KEY)`,
        );
      });

      afterEach(async () => {
        for (const close of closes.splice(0).reverse()) await close();
        await connection.sql.query(`DELETE FROM ${table}`);
        await connection.sql.query(`DELETE FROM ${consumed}`);
      });

      afterAll(async () => {
        if (connection !== undefined) {
          const dialect = outboxDialectOf(connection.sql.databaseType);
          for (const statement of outboxTableDropDdl(dialect, { tableName: table })) {
            await connection.sql.query(statement);
          }
          await connection.sql.query(`DROP TABLE IF EXISTS ${consumed}`);
        }
        await orm?.close(true);
      });

      async function boot(
        autoStart: boolean,
        consumer?: (publisher: OutboxPublisher) => OutboxPublisher,
      ) {
        const publisher = new RecordingPublisher();
        const moduleRef = await Test.createTestingModule({
          imports: [
            OutboxModule.forRoot({
              connection,
              publisher: consumer === undefined ? publisher : consumer(publisher),
              tableName: table,
              autoStart,
              dispatcher: { pollIntervalMs: 50, listen: false },
            }),
          ],
        }).compile();
        await moduleRef.init();
        closes.push(() => moduleRef.close());
        return {
          publisher,
          outbox: moduleRef.get<OutboxService<MikroORM['em']>>(OutboxService),
          admin: moduleRef.get(OutboxAdmin),
          dispatcher: moduleRef.get(OutboxDispatcher),
        };
      }

      type App = Awaited<ReturnType<typeof boot>>;

      const enqueue = (app: App, n: number): Promise<string> =>
        orm.em.transactional((em) => app.outbox.enqueue(message(n), em));

      /** Runs `work` inside the app's transaction, then rolls that transaction back. */
      async function insideRolledBack<T>(work: () => Promise<T>): Promise<T> {
        let value: { of: T } | undefined;
        const outcome = await orm.em
          .transactional(async () => {
            value = { of: await work() };
            throw new Rollback();
          })
          .catch((error: unknown) => error);
        expect(outcome).toBeInstanceOf(Rollback);
        if (value === undefined) throw new Error('the work did not finish');
        return value.of;
      }

      async function deadMessage(app: App): Promise<string> {
        const id = await enqueue(app, 1);
        app.publisher.fail(id, 'permanent', { error: new PermanentPublishError('refused') });
        await app.dispatcher.drain();
        expect((await app.admin.get(id))?.status).toBe('dead');
        return id;
      }

      it('keeps a retry of a dead message made inside a transaction that rolls back', async () => {
        const app = await boot(false);
        const id = await deadMessage(app);

        const report = await insideRolledBack(() => app.admin.retry([id]));

        expect(report.requeued).toBe(1);
        expect((await app.admin.get(id))?.status).toBe('pending');
      });

      it('keeps a purge of a dead message made inside a transaction that rolls back', async () => {
        const app = await boot(false);
        const id = await deadMessage(app);

        const deleted = await insideRolledBack(() => app.admin.purge([id]));

        expect(deleted).toBe(1);
        expect(await app.admin.get(id)).toBeNull();
      });

      it('records the delivery of runOnce() and drain() made inside a transaction that rolls back', async () => {
        const app = await boot(false);
        const first = await enqueue(app, 1);
        const once = await insideRolledBack(() => app.dispatcher.runOnce());
        expect(once.published).toBe(1);
        expect((await app.admin.get(first))?.status).toBe('delivered');

        const second = await enqueue(app, 2);
        expect(await insideRolledBack(() => app.dispatcher.drain())).toBe(1);
        expect((await app.admin.get(second))?.status).toBe('delivered');
        expect(app.publisher.sentIds).toEqual([first, second]);
      });

      // Not on SQLite: MikroORM's one connection there is the app's until its transaction ends,
      // so a consumer's transaction of its own waits for it (docs/mikro-orm.md#on-sqlite).
      if (database !== 'sqlite') {
        it("commits a consumer's own em.transactional() made during a runOnce() inside a transaction that rolls back", async () => {
          // An in-process consumer (a LocalPublisher handler) writing in a transaction of its own.
          const schema = orderSchema(consumed);
          const app = await boot(false, (recording) => ({
            async publish(records, signal) {
              for (const record of records) {
                await orm.em.transactional((em) => {
                  em.persist(em.create(schema, { id: record.messageId }));
                  return Promise.resolve();
                });
              }
              return recording.publish(records, signal);
            },
          }));
          const id = await enqueue(app, 1);

          expect((await insideRolledBack(() => app.dispatcher.runOnce())).published).toBe(1);

          const { rows } = await connection.sql.query<{ id: string }>(`SELECT id FROM ${consumed}`);
          expect(rows.map((r) => r.id)).toEqual([id]);
          expect((await app.admin.get(id))?.status).toBe('delivered');
        });
      }

      it('goes on delivering after a runOnce() made inside a transaction that commits', async () => {
        const app = await boot(true);
        await orm.em.transactional(() => app.dispatcher.runOnce());

        const id = await enqueue(app, 1);

        await waitFor('the later message published', () => app.publisher.sentIds.includes(id));
        await waitFor(
          'its delivery recorded',
          async () => (await app.admin.get(id))?.status === 'delivered',
        );
        expect(app.dispatcher.status().pausedUntil).toBeNull();
      });
    },
  );
}
