import type { DataSource } from 'typeorm';
import { tableNamesFor } from '../../lib/store/schema/outbox-table-ddl';
import { mysqlPurgeCandidates } from '../../lib/store/mysql/mysql.sql';
import { postgresPurge } from '../../lib/store/postgres/postgres.sql';
import { sqlitePurge } from '../../lib/store/sqlite/sqlite.sql';
import { TEST_DATABASES, type TestDatabase } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';

// The cleaner's statements read its cut-off index, so a pass over a table that keeps a large
// delivered history costs an index probe, not a scan, when nothing is due: asserted on each
// database's own plan of the statement the store runs, over 20 000 retained delivered rows and
// fresh statistics. Deleting the due rows oldest first is covered by the retries and dispatcher
// suites; this spec is about what the database reads.

const ROWS = 20_000;

/** Fills `table` with `ROWS` delivered rows (delivered within the last minute) and 50 dead ones. */
async function seed(db: TestDatabase['name'], ds: DataSource, table: string): Promise<void> {
  const cols = `message_id, topic, event_type, payload, headers, status, attempts, delivered_at, dead_at`;
  if (db === 'postgres') {
    await ds.query(`INSERT INTO "${table}" (${cols})
SELECT gen_random_uuid(), 't', 'T', '{}', '{}', CASE WHEN g <= 50 THEN 'dead' ELSE 'delivered' END, 1,
  CASE WHEN g <= 50 THEN NULL ELSE now() - (g % 60) * interval '1 second' END,
  CASE WHEN g <= 50 THEN now() ELSE NULL END
FROM generate_series(1, ${ROWS}) AS g`);
    await ds.query(`ANALYZE "${table}"`);
  } else if (db === 'mariadb') {
    await ds.query(`INSERT INTO \`${table}\` (${cols})
SELECT UNHEX(REPLACE(UUID(), '-', '')), 't', 'T', '{}', '{}', IF(seq <= 50, 'dead', 'delivered'), 1,
  IF(seq <= 50, NULL, NOW(6) - INTERVAL (seq % 60) SECOND), IF(seq <= 50, NOW(6), NULL)
FROM seq_1_to_${ROWS}`);
    await ds.query(`ANALYZE TABLE \`${table}\``);
  } else {
    await ds.query(`WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ${ROWS})
INSERT INTO "${table}" (${cols})
SELECT lower(hex(randomblob(16))), 't', 'T', '{}', '{}', CASE WHEN n <= 50 THEN 'dead' ELSE 'delivered' END, 1,
  CASE WHEN n <= 50 THEN NULL ELSE strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (n % 60) || ' seconds') END,
  CASE WHEN n <= 50 THEN strftime('%Y-%m-%d %H:%M:%f', 'now') ELSE NULL END
FROM g`);
    await ds.query(`ANALYZE`);
  }
}

/** The database's plan of the cleaner's statement for `status`, as text. */
async function planOf(
  db: TestDatabase['name'],
  ds: DataSource,
  table: string,
  status: 'delivered' | 'dead',
): Promise<string> {
  const day = 86_400_000;
  if (db === 'postgres') {
    // EXPLAIN ANALYZE runs the DELETE: inside a transaction that is rolled back.
    const runner = ds.createQueryRunner();
    await runner.startTransaction();
    try {
      const rows = (await runner.query(
        `EXPLAIN (ANALYZE, FORMAT TEXT) ${postgresPurge(tableNamesFor('postgres', { tableName: table }), status)}`,
        [day, 1_000],
      )) as { 'QUERY PLAN': string }[];
      return rows.map((r) => r['QUERY PLAN']).join('\n');
    } finally {
      await runner.rollbackTransaction();
      await runner.release();
    }
  }
  if (db === 'mariadb') {
    const rows = await ds.query<Record<string, string>[]>(
      `EXPLAIN FORMAT=JSON ${mysqlPurgeCandidates(tableNamesFor('mysql', { tableName: table }), status)}`,
      [day, 1_000],
    );
    return rows.map((r) => Object.values(r).join(' ')).join('\n');
  }
  const rows = await ds.query<{ detail: string }[]>(
    `EXPLAIN QUERY PLAN ${sqlitePurge(tableNamesFor('sqlite', { tableName: table }), status)}`,
    [day, 1_000],
  );
  return rows.map((r) => r.detail).join('\n');
}

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `the cleaner's index on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_ci' });

    it('finds due delivered and dead rows through its cut-off index, not by reading the table', async () => {
      const table = await scope.table();
      await seed(db.name, scope.ds, table);
      const delivered = await planOf(db.name, scope.ds, table, 'delivered');
      const dead = await planOf(db.name, scope.ds, table, 'dead');
      if (db.name === 'postgres') {
        expect(delivered).toContain(`${table}_delivered_idx`);
        expect(dead).toContain(`${table}_dead_idx`);
        // Nothing was due: the index probe returned no row, so nothing was deleted.
        expect(delivered).toMatch(/rows=0 loops=1\)\n?/);
        expect(`${delivered}\n${dead}`).not.toMatch(new RegExp(`Seq Scan on ${table}`));
      } else if (db.name === 'mariadb') {
        expect(delivered).toMatch(new RegExp(`"key": "${table}_done_idx"`));
        expect(dead).toMatch(new RegExp(`"key": "${table}_done_idx"`));
        expect(`${delivered}\n${dead}`).not.toMatch(/"access_type": "ALL"/);
      } else {
        expect(delivered).toMatch(
          new RegExp(
            `SEARCH ${table} USING (COVERING )?INDEX ${table}_delivered_idx \\(delivered_at<\\?\\)`,
          ),
        );
        expect(dead).toMatch(
          new RegExp(`SEARCH ${table} USING (COVERING )?INDEX ${table}_dead_idx \\(dead_at<\\?\\)`),
        );
        expect(`${delivered}\n${dead}`).not.toMatch(new RegExp(`SCAN ${table}\\b(?! USING)`));
      }
    });
  });
}
