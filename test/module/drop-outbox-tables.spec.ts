import type { DataSource } from 'typeorm';
import {
  dropOutboxTables,
  ensureOutboxArchiveTable,
  ensureOutboxTable,
  outboxAuditTableDdl,
  type OutboxTableDropOptions,
} from '../../lib';
import { logTailingOf } from '../../lib/log-tailing/log-tailing.databases';
import { outboxDialectOf, tableNamesFor } from '../../lib/store/schema/outbox-table-ddl';
import { RecordingPublisher } from '../../lib/testing';
import { readAttempts, TEST_DATABASES, uniqueTable } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';

// dropOutboxTables on each database: a table made with every schema step (sequence counters,
// tenant column, attempt history), its archive, an audit table named after it, MySQL/MariaDB's
// binlog position table and a partitioned table's guard and partitions, used by a module
// (sequence numbers given, a failed attempt recorded), then dropped: nothing whose name is the
// table's, or starts with it, is left in the database's catalog.

/** The names of the database's objects that are `table` or start with `<table>_`. */
async function objectsOf(ds: DataSource, table: string): Promise<string[]> {
  const prefix = `${table}_`;
  const type = ds.options.type;
  const rows: { name: string }[] =
    type === 'postgres'
      ? await ds.query(
          `SELECT relname AS name FROM pg_class WHERE relname = $1 OR starts_with(relname, $2)
           UNION ALL SELECT conname FROM pg_constraint WHERE starts_with(conname, $2)
           UNION ALL SELECT typname FROM pg_type WHERE typname = $1 OR starts_with(typname, $2)
           UNION ALL SELECT proname FROM pg_proc WHERE starts_with(proname, $2)`,
          [table, prefix],
        )
      : type === 'mariadb' || type === 'mysql'
        ? await ds.query(
            `SELECT TABLE_NAME AS name FROM information_schema.TABLES
              WHERE TABLE_SCHEMA = DATABASE() AND (TABLE_NAME = ? OR LEFT(TABLE_NAME, ?) = ?)
             UNION ALL SELECT TRIGGER_NAME FROM information_schema.TRIGGERS
              WHERE TRIGGER_SCHEMA = DATABASE() AND LEFT(TRIGGER_NAME, ?) = ?
             UNION ALL SELECT ROUTINE_NAME FROM information_schema.ROUTINES
              WHERE ROUTINE_SCHEMA = DATABASE() AND LEFT(ROUTINE_NAME, ?) = ?`,
            [table, prefix.length, prefix, prefix.length, prefix, prefix.length, prefix],
          )
        : await ds.query(
            `SELECT name FROM sqlite_master WHERE name = ? OR substr(name, 1, ?) = ?
              OR tbl_name = ? OR substr(tbl_name, 1, ?) = ?`,
            [table, prefix.length, prefix, table, prefix.length, prefix],
          );
  return rows.map((row) => row.name).sort();
}

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
        scope.defer(() => dropOutboxTables(scope.ds, { tableName: table }));
        await makeEverything(table, partitioned);
        await use(table);
        const made = await objectsOf(scope.ds, table);
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
        expect(await objectsOf(scope.ds, table)).toEqual([]);
        // Again on what is gone: nothing to drop, no error.
        await dropOutboxTables(scope.ds, options);
      },
    );

    it('leaves the other outbox tables of the database, and an audit table it is not given', async () => {
      const [gone, kept] = [uniqueTable('outbox_drop'), uniqueTable('outbox_drop')];
      scope.defer(() =>
        dropOutboxTables(scope.ds, { tableName: kept, auditTable: { tableName: `${gone}_audit` } }),
      );
      await makeEverything(gone, false);
      await makeEverything(kept, false);
      const before = await objectsOf(scope.ds, kept);
      await dropOutboxTables(scope.ds, { tableName: gone });
      // Only the audit table (and on PostgreSQL its key, sequence and row type) is left.
      const left = await objectsOf(scope.ds, gone);
      expect(left).toContain(`${gone}_audit`);
      expect(left.filter((name) => !name.startsWith(`${gone}_audit`))).toEqual([]);
      expect(await objectsOf(scope.ds, kept)).toEqual(before);
    });
  });
});
