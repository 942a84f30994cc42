import type { MikroORM } from '@mikro-orm/core';
import { Test } from '@nestjs/testing';
import { OutboxAdmin, OutboxDispatcher, OutboxModule, OutboxService } from '../../lib';
import { mikroOrmOutbox, mikroOrmSqlRunner } from '../../lib/connections/mikro-orm';
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
import { openMikroOrm } from '../connections/mikro-orm-targets';

// A SQL port that hands the dispatcher a transaction that has already ended (as MikroORM's port
// did after one runOnce() inside the app's transaction): the driver says the handle is finished
// ("Transaction query already complete"), while the database answers. That fails the claim, but
// is no outage: claims are not paused, and the next poll after the port is mended delivers.

for (const database of ['postgres', 'mariadb'] as const) {
  describeWith([database], `a claim on an ended transaction (MikroORM on ${database})`, () => {
    const table = uniqueTable('outbox_ended');
    let orm: MikroORM;
    let real: OutboxConnection<MikroORM['em']>;

    beforeAll(async () => {
      orm = await openMikroOrm(database);
      real = mikroOrmOutbox(orm);
      await createOutboxTable(real.sql, { tableName: table });
    });

    afterAll(async () => {
      if (real !== undefined) {
        const dialect = outboxDialectOf(real.sql.databaseType);
        for (const statement of outboxTableDropDdl(dialect, { tableName: table })) {
          await real.sql.query(statement);
        }
      }
      await orm?.close(true);
    });

    it('fails the claim without pausing claims, and delivers once the port hands out live transactions', async () => {
      const ended = await orm.em.getConnection().transactional((trx) => Promise.resolve(trx));
      const dialect = database === 'postgres' ? 'postgres' : 'mysql';
      let broken = true;
      let failedClaims = 0;
      const connection: OutboxConnection<MikroORM['em']> = {
        ...real,
        sql: {
          ...real.sql,
          transaction: (work) => {
            if (!broken) return real.sql.transaction(work);
            failedClaims += 1;
            return work(mikroOrmSqlRunner(orm.em, ended, dialect));
          },
        },
      };
      const outages: unknown[] = [];
      const publisher = new RecordingPublisher();
      const moduleRef = await Test.createTestingModule({
        imports: [
          OutboxModule.forRoot({
            connection,
            publisher,
            tableName: table,
            dispatcher: { pollIntervalMs: 50, listen: false },
            observer: { onOutage: (error) => outages.push(error) },
          }),
        ],
      }).compile();
      moduleRef.useLogger(['fatal']);
      await moduleRef.init();
      try {
        const outbox = moduleRef.get<OutboxService<MikroORM['em']>>(OutboxService);
        const dispatcher = moduleRef.get(OutboxDispatcher);
        const id = await orm.em.transactional((em) =>
          outbox.enqueue({ topic: 'orders', payload: {} }, em),
        );

        await waitFor('several claims on the ended transaction', () => failedClaims >= 5);
        expect(outages).toEqual([]);
        expect(dispatcher.status().pausedUntil).toBeNull();
        expect(publisher.sentIds).toEqual([]);

        broken = false;
        // Within a few polls: an outage pause would have grown past this by now.
        await waitFor('the message published', () => publisher.sentIds.includes(id), {
          timeoutMs: 1_000,
        });
        await waitFor(
          'its delivery recorded',
          async () => (await moduleRef.get(OutboxAdmin).get(id))?.status === 'delivered',
        );
        expect(outages).toEqual([]);
      } finally {
        await moduleRef.close();
      }
    });
  });
}
