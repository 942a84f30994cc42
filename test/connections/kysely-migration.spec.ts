import { Migrator } from 'kysely';
import { OutboxOptionsError } from '../../lib';
import { outboxKyselyMigration } from '../../lib/connections/kysely';
import { outboxSchemaStatus } from '../../lib/store/schema/schema-status';
import { uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';
import { mariadbPool, openKysely, pgPool } from './driver-targets';

// outboxKyselyMigration(): the outbox table as a migration of Kysely's own Migrator, up to the
// current schema version and back down, on each database.
//
// On a database of its own: Kysely's Migrator looks for its tables by introspecting every table
// of the database (0.28), which on PostgreSQL reads each table's serial sequence by name and fails
// when another suite drops a table meanwhile, and on MariaDB opens every table's definition and
// waits behind another suite's ALTER TABLE.
const OWN_DATABASE = 'outbox_kysely_migration';

async function ensureOwnDatabase(database: 'postgres' | 'mariadb'): Promise<void> {
  if (database === 'mariadb') {
    const pool = mariadbPool(1);
    try {
      await pool.query(`CREATE DATABASE IF NOT EXISTS \`${OWN_DATABASE}\``);
    } finally {
      await pool.end();
    }
    return;
  }
  const pool = pgPool(1);
  try {
    const found = await pool.query('SELECT 1 FROM pg_database WHERE datname = $1', [OWN_DATABASE]);
    if (found.rowCount === 0) await pool.query(`CREATE DATABASE "${OWN_DATABASE}"`);
  } finally {
    await pool.end();
  }
}

it('refuses an unsafe table name when the migration is defined', () => {
  expect(() => outboxKyselyMigration({ tableName: 'outbox; drop table x' })).toThrow(
    OutboxOptionsError,
  );
});

for (const database of ['postgres', 'mariadb', 'sqlite'] as const) {
  describeWith(
    database === 'sqlite' ? [] : [database],
    `outboxKyselyMigration on ${database}`,
    () => {
      it("Kysely's Migrator creates the current schema, and migrating down drops it", async () => {
        if (database !== 'sqlite') await ensureOwnDatabase(database);
        const { db, sql, remove } = openKysely(
          database,
          database === 'sqlite' ? undefined : OWN_DATABASE,
        );
        const tableName = uniqueTable('outbox_kmig');
        const migrator = new Migrator({
          db,
          provider: {
            getMigrations: () =>
              Promise.resolve({ '2026_11_23_outbox': outboxKyselyMigration({ tableName }) }),
          },
          migrationTableName: `${tableName}_mig`,
          migrationLockTableName: `${tableName}_miglock`,
        });
        try {
          expect((await outboxSchemaStatus(sql, { tableName })).version).toBe(0);
          const up = await migrator.migrateToLatest();
          expect(up.error).toBeUndefined();
          expect(up.results?.map((r) => [r.migrationName, r.status])).toEqual([
            ['2026_11_23_outbox', 'Success'],
          ]);
          const status = await outboxSchemaStatus(sql, { tableName });
          expect(status.version).toBe(status.latest);

          const down = await migrator.migrateDown();
          expect(down.error).toBeUndefined();
          expect((await outboxSchemaStatus(sql, { tableName })).version).toBe(0);
        } finally {
          for (const t of [`${tableName}_mig`, `${tableName}_miglock`]) {
            await sql.query(
              `DROP TABLE IF EXISTS ${database === 'mariadb' ? `\`${t}\`` : `"${t}"`}`,
            );
          }
          await db.destroy();
          remove?.();
        }
      });
    },
  );
}
