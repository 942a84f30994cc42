import { Migrator } from 'kysely';
import { OutboxOptionsError } from '../../lib';
import { outboxKyselyMigration } from '../../lib/connections/kysely';
import { outboxSchemaStatus } from '../../lib/store/schema/schema-status';
import { uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';
import { openKysely } from './driver-targets';

// outboxKyselyMigration(): the outbox table as a migration of Kysely's own Migrator, up to the
// current schema version and back down, on each database.

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
        const { db, sql, remove } = openKysely(database);
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
