import {
  dropOutboxTables,
  ensureOutboxArchiveTable,
  ensureOutboxTable,
  outboxAuditTableDdl,
  type OutboxTableDropOptions,
} from '../../lib/schema';
import { logTailingOf } from '../../lib/log-tailing/log-tailing.databases';
import { outboxDialectOf, tableNamesFor } from '../../lib/store/schema/outbox-table-ddl';
import { RecordingPublisher } from '../../lib/testing';
import { objectsNamedAfter } from '../support/catalog';
import { readAttempts, TEST_DATABASES, uniqueTable } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';
import { OUTBOX_STEP_OPTIONS } from '../../lib/store/schema/schema-steps';

// dropOutboxTables on each database: a table made with every schema step (sequence counters,
// tenant column, attempt history), its archive, an audit table named after it, MySQL/MariaDB's
// binlog position table and a partitioned table's guard and partitions, used by a module
// (sequence numbers given, a failed attempt recorded), then dropped: nothing whose name is the
// table's, or starts with it, is left in the database's catalog.

describe.each(TEST_DATABASES)('dropOutboxTables on $name', (db) => {
  describeWith(db.service === null ? [] : [db.service], `on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_drop' });

    /** Makes `table` with everything the outbox can make for it on this database. */
    async function makeEverything(table: string, partitioned: boolean): Promise<void> {
      const ds = scope.ds;
      const dialect = outboxDialectOf(ds.options.type);
      await ensureOutboxTable(ds, {
        tableName: table,
        partitioning: partitioned ? { interval: 'day' } : undefined,
        with: OUTBOX_STEP_OPTIONS,
      });
      await ensureOutboxArchiveTable(ds, { tableName: table });
      for (const statement of outboxAuditTableDdl(dialect, { tableName: `${table}_audit` }))
        await ds.query(statement);
      // The binlog position table on MySQL/MariaDB (PostgreSQL's publication is not a table).
      if (dialect === 'mysql')
        for (const statement of logTailingOf(dialect)?.ddl(
          tableNamesFor(dialect, { tableName: table }),
          {},
        ) ?? [])
          await ds.query(statement);
    }

    /** Uses the table as an app does: sequence numbers given, one failed attempt recorded. */
    async function use(table: string): Promise<void> {
      const publisher = new RecordingPublisher();
      const app = await scope.open({ table, publisher, options: { ordering: { sequence: true } } });
      await scope.ds.transaction((manager) =>
        app.outbox.enqueue(
          ['a', 'b', 'a'].map((key, n) => ({ topic: 'orders', key, payload: { n } })),
          manager,
        ),
      );
      publisher.failNext();
      await app.dispatcher.drain();
      expect(publisher.messages.length).toBeGreaterThan(0);
      expect(await readAttempts(scope.ds, table)).toHaveLength(1);
      await app.close();
    }

    const layouts = db.name === 'sqlite' ? [false] : [false, true];
    it.each(layouts)(
      'leaves nothing named after the table (partitioned: %s)',
      async (partitioned) => {
        const table = uniqueTable('outbox_drop');
        scope.defer(() =>
          dropOutboxTables(scope.ds, {
            tableName: table,
            auditTable: { tableName: `${table}_audit` },
          }),
        );
        await makeEverything(table, partitioned);
        await use(table);
        const made = await objectsNamedAfter(scope.ds, table);
        expect(made).toEqual(
          expect.arrayContaining([
            table,
            `${table}_attempts`,
            `${table}_key_seq`,
            `${table}_archive`,
            `${table}_audit`,
            ...(db.name === 'mariadb' ? [`${table}_key_lock`, `${table}_log_position`] : []),
            ...(partitioned ? [`${table}_ids`] : []),
          ]),
        );

        const options: OutboxTableDropOptions = {
          tableName: table,
          auditTable: { tableName: `${table}_audit` },
        };
        await dropOutboxTables(scope.ds, options);
        expect(await objectsNamedAfter(scope.ds, table)).toEqual([]);
        // Again on what is gone: nothing to drop, no error.
        await dropOutboxTables(scope.ds, options);
      },
    );

    it('leaves the other outbox tables of the database, and an audit table it is not given', async () => {
      const [gone, kept] = [uniqueTable('outbox_drop'), uniqueTable('outbox_drop')];
      scope.defer(async () => {
        for (const table of [gone, kept])
          await dropOutboxTables(scope.ds, {
            tableName: table,
            auditTable: { tableName: `${table}_audit` },
          });
      });
      await makeEverything(gone, false);
      await makeEverything(kept, false);
      const before = await objectsNamedAfter(scope.ds, kept);
      await dropOutboxTables(scope.ds, { tableName: gone });
      // Only the audit table (and on PostgreSQL its key, sequence and row type) is left.
      const left = await objectsNamedAfter(scope.ds, gone);
      expect(left).toContain(`${gone}_audit`);
      expect(left.filter((name) => !name.startsWith(`${gone}_audit`))).toEqual([]);
      expect(await objectsNamedAfter(scope.ds, kept)).toEqual(before);
    });
  });
});
