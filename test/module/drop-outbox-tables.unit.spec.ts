import { betterSqlite3Outbox } from '../../lib/connections/better-sqlite3';
import { OutboxOptionsError } from '../../lib';
import { dropOutboxTables } from '../../lib/schema';
import { logTailingOf } from '../../lib/log-tailing/log-tailing.databases';
import { OUTBOX_DATABASES } from '../../lib/store/outbox-databases';
import {
  createOutboxArchiveTable,
  createOutboxTable,
  outboxTableDropDdl,
  tableNamesFor,
  tablePartitioning,
  type OutboxDialect,
} from '../../lib/store/schema/outbox-table-ddl';
import { applySchemaSteps, OUTBOX_STEP_OPTIONS } from '../../lib/store/schema/schema-steps';
import { openSqliteFile } from '../connections/driver-targets';

// dropOutboxTables must remove every table the outbox makes for a table, including the ones a
// schema step added after it was written. The schema steps are run here against a recorder that
// answers every statement with no rows (as against an empty database), on each database, and every
// table their statements create must be one the drop removes.

const TABLE = 'orders_outbox';

/** The tables a list of statements creates, unquoted and unqualified; partitions left out. */
function createdTables(statements: readonly string[]): string[] {
  return statements.flatMap((statement) => {
    const match = /^\s*CREATE TABLE (?:IF NOT EXISTS )?((?:[`"]?\w+[`"]?\.)?[`"]?\w+[`"]?)/i.exec(
      statement,
    );
    // A PostgreSQL partition goes with its partitioned table.
    if (match === null || /\bPARTITION OF\b/i.test(statement)) return [];
    return [unquoted(match[1] ?? '')];
  });
}

function droppedTables(statements: readonly string[]): string[] {
  return statements.map((statement) => {
    const match = /^DROP TABLE IF EXISTS (\S+)$/.exec(statement);
    if (match === null) throw new Error(`not a drop of one table: ${statement}`);
    return unquoted(match[1] ?? '');
  });
}

function unquoted(name: string): string {
  return (name.split('.').at(-1) ?? '').replace(/[`"]/g, '');
}

/** Every statement the schema steps run for a new table (partitioned or not) on `dialect`. */
async function schemaStatements(dialect: OutboxDialect, partitioned: boolean): Promise<string[]> {
  const statements: string[] = [];
  await applySchemaSteps(
    {
      database: OUTBOX_DATABASES[dialect],
      names: tableNamesFor(dialect, { tableName: TABLE }),
      run: (statement) => {
        statements.push(statement);
        return Promise.resolve([]);
      },
      partitioning: partitioned ? tablePartitioning({ partitioning: { interval: 'day' } }) : null,
      // Every option's steps: the drop must remove what any of them made.
    },
    OUTBOX_STEP_OPTIONS,
  );
  return statements;
}

const LAYOUTS: readonly (readonly [OutboxDialect, boolean])[] = [
  ['postgres', false],
  ['postgres', true],
  ['mysql', false],
  ['mysql', true],
  ['sqlite', false],
];

describe('dropOutboxTables', () => {
  it.each(LAYOUTS)(
    'drops every table the schema steps make on %s (partitioned: %s), and the schema drop leaves the archive and the log position',
    async (dialect, partitioned) => {
      const steps = createdTables(await schemaStatements(dialect, partitioned));
      const names = tableNamesFor(dialect, { tableName: TABLE });
      const apart = createdTables([
        ...OUTBOX_DATABASES[dialect].schema.createArchiveTable(names),
        ...(logTailingOf(dialect)?.ddl(names, {}) ?? []),
      ]);
      expect(steps).toContain(TABLE);
      expect(steps).toContain(`${TABLE}_key_seq`);
      expect(apart).toContain(`${TABLE}_archive`);

      const all = droppedTables(outboxTableDropDdl(dialect, { tableName: TABLE }, 'all'));
      expect(steps.filter((t) => !all.includes(t))).toEqual([]);
      expect(apart.filter((t) => !all.includes(t))).toEqual([]);
      // The outbox table last: its indexes, partitions and sequences go with it.
      expect(all.at(-1)).toBe(TABLE);

      const schema = droppedTables(outboxTableDropDdl(dialect, { tableName: TABLE }));
      expect(steps.filter((t) => !schema.includes(t))).toEqual([]);
      expect(apart.filter((t) => schema.includes(t))).toEqual([]);
    },
  );

  it('leaves nothing named after the table in a SQLite database, through a connection', async () => {
    const db = openSqliteFile(':memory:');
    const connection = betterSqlite3Outbox(db);
    const objects = (prefix: string): string[] =>
      (db.prepare('SELECT name FROM sqlite_master ORDER BY name').all() as { name: string }[])
        .map((row) => row.name)
        .filter((name) => name.startsWith(prefix));
    await createOutboxTable(connection.sql, { tableName: TABLE, with: OUTBOX_STEP_OPTIONS });
    await createOutboxArchiveTable(connection.sql, { tableName: TABLE });
    await createOutboxTable(connection.sql, {
      tableName: 'kept_outbox',
      with: OUTBOX_STEP_OPTIONS,
    });
    expect(objects(TABLE)).toEqual(
      expect.arrayContaining([TABLE, `${TABLE}_attempts`, `${TABLE}_key_seq`, `${TABLE}_archive`]),
    );

    await dropOutboxTables(connection, { tableName: TABLE });
    expect(objects(TABLE)).toEqual([]);
    // Another outbox table of the database is left as it was; dropping again changes nothing.
    expect(objects('kept_outbox')).toContain('kept_outbox_key_seq');
    await dropOutboxTables(connection.sql, { tableName: TABLE });
    db.close();
  });

  it('refuses a name that is not an identifier, and runs nothing', async () => {
    const db = openSqliteFile(':memory:');
    const connection = betterSqlite3Outbox(db);
    await createOutboxTable(connection.sql, { tableName: 'outbox' });
    await expect(
      dropOutboxTables(connection, { tableName: 'outbox; DROP TABLE outbox' }),
    ).rejects.toThrow(OutboxOptionsError);
    await expect(
      dropOutboxTables(connection, { tableName: 'outbox', auditTable: { tableName: 'a-b' } }),
    ).rejects.toThrow(/auditTable\.tableName/);
    expect(db.prepare("SELECT name FROM sqlite_master WHERE name = 'outbox'").all()).toHaveLength(
      1,
    );
    db.close();
  });
});
