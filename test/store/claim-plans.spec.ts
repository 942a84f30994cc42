import type { DataSource } from 'typeorm';
import type { OutboxQueuePolicy, OutboxStore } from '../../lib/store/ports/outbox-store.port';
import { claimWindow } from '../../lib/store/shared-sql/claim-window';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import {
  mysqlClaimWindow,
  mysqlFirstBlocking,
  mysqlFirstWaiting,
  mysqlKeyRows,
  mysqlKeyRowsParams,
  mysqlOrphanKeys,
  mysqlStillHeld,
} from '../../lib/store/mysql/mysql.sql';
import {
  postgresClaim,
  postgresOpening,
  postgresOrphanKeys,
  postgresPark,
  postgresPromote,
} from '../../lib/store/postgres/postgres.sql';
import {
  sqliteClaimWindow,
  sqliteOrphanKeys,
  sqlitePark,
  sqlitePromote,
} from '../../lib/store/sqlite/sqlite.sql';
import { outboxDialectOf, tableNamesFor } from '../../lib/store/schema/outbox-table-ddl';
import type { OutboxTableNames } from '../../lib/internal/sql-identifier';
import { TEST_DATABASES, uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';

// Issue 13 item 8: statistics taken while one key fills the table (autovacuum during an import)
// made each database answer "is there an earlier message of this key?" by walking that key's
// backlog (sequential scan, or the primary key's id range) once per row asked about: seconds
// per claim. The head-of-key lookups of the claim, park, promote and orphan statements must be
// probes of the key index whatever the statistics say. Asserted on the plans, not on timings.

const STUCK = 'stuck';
const BIG = 'big';
const BACKLOG = 20_000;
const OTHER_KEYS = 30;
const POLICY: OutboxQueuePolicy = {
  ordered: true,
  deadBlocksKey: true,
  maxRun: 50,
  batchSize: 200,
};

/**
 * Inserts `count` rows of key `prefix` (or `prefix` + seq % keys) with a status, through a
 * series of the database's own, so 20 000 rows take one statement.
 */
// Rows of a realistic width: PostgreSQL scales its row estimate by the table's pages, and with
// tiny rows a table analysed when nearly empty would still look small to it.
const PG_PAYLOAD = `('{"pad":"' || repeat('x', 400) || '"}')::json`;

async function insertRows(
  ds: DataSource,
  names: OutboxTableNames,
  rows: { prefix: string; keys?: number; count: number; status: 'pending' | 'waiting' | 'dead' },
): Promise<void> {
  const t = names.table;
  const { prefix, keys, count, status } = rows;
  const dead = status === 'dead';
  const perKey = keys === undefined ? [] : [keys];
  switch (outboxDialectOf(ds.options.type)) {
    case 'postgres':
      await ds.query(
        `INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, status, dead_at)
SELECT gen_random_uuid(), 'orders', $1 || ${keys === undefined ? "''" : '(g % $4::int)'}, 'e', ${PG_PAYLOAD}, $2, ${dead ? 'now()' : 'NULL'}
FROM generate_series(1, $3::int) AS g`,
        [prefix, status, count, ...perKey],
      );
      break;
    case 'mysql':
      await ds.query(
        `INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, headers, status, dead_at)
SELECT UNHEX(REPLACE(UUID(), '-', '')), 'orders', CONCAT(?, ${keys === undefined ? "''" : 'seq % ?'}), 'e', '{}', '{}', ?, ${dead ? 'UTC_TIMESTAMP(6)' : 'NULL'}
FROM seq_1_to_${count}`,
        [prefix, ...perKey, status],
      );
      break;
    case 'sqlite':
      await ds.query(
        `WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < ?)
INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, status, dead_at)
SELECT lower(hex(randomblob(16))), 'orders', ? || ${keys === undefined ? "''" : '(x % ?)'}, 'e', '{}', ?, ${dead ? "strftime('%Y-%m-%d %H:%M:%f', 'now')" : 'NULL'}
FROM g`,
        [count, prefix, ...perKey, status],
      );
      break;
  }
}

async function analyse(ds: DataSource, names: OutboxTableNames): Promise<void> {
  switch (outboxDialectOf(ds.options.type)) {
    case 'postgres':
      await ds.query(`ANALYZE ${names.table}`);
      break;
    case 'mysql':
      await ds.query(`ANALYZE TABLE ${names.table}`);
      break;
    case 'sqlite':
      await ds.query('ANALYZE');
      break;
  }
}

/**
 * 'one key fills the table': the dead head of 'stuck' and its parked backlog, ANALYZE, then the
 * other keys' due messages (two each). 'nearly empty': ANALYZE over one row ('first'), then a
 * key with a long due backlog ('big'), then the other keys.
 */
type Statistics = 'one key fills the table' | 'nearly empty';

async function load(ds: DataSource, names: OutboxTableNames, stats: Statistics): Promise<void> {
  if (stats === 'one key fills the table') {
    await insertRows(ds, names, { prefix: STUCK, count: 1, status: 'dead' });
    await insertRows(ds, names, { prefix: STUCK, count: BACKLOG, status: 'waiting' });
    await analyse(ds, names);
  } else {
    await insertRows(ds, names, { prefix: 'first', count: 1, status: 'pending' });
    await analyse(ds, names);
    await insertRows(ds, names, { prefix: BIG, count: BACKLOG, status: 'pending' });
  }
  await insertRows(ds, names, {
    prefix: 'k',
    keys: OTHER_KEYS,
    count: OTHER_KEYS * 2,
    status: 'pending',
  });
}

interface PgPlanNode {
  'Node Type': string;
  'Parent Relationship'?: string;
  'CTE Name'?: string;
  Strategy?: string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Index Cond'?: string;
  Filter?: string;
  'Recheck Cond'?: string;
  Plans?: PgPlanNode[];
}

/**
 * PostgreSQL: every scan of the outbox table that looks at `message_key` does so in an index
 * condition of the key index; a filter on the key (a sequential scan, or the primary key read
 * in id order) is the walk over the big key's backlog.
 */
function pgKeyFilters(
  node: PgPlanNode,
  table: string,
  waitingScans: boolean,
  found: string[] = [],
  once = false,
): string[] {
  // An InitPlan runs once per statement, not per candidate: the promotion's look for any
  // waiting row at all (an EXISTS, which stops at the first entry) is one.
  const runsOnce = once || node['Parent Relationship'] === 'InitPlan';
  const onTable = node['Relation Name'] === table;
  if (onTable && (node.Filter ?? '').includes('message_key'))
    found.push(`${node['Node Type']} ${node['Index Name'] ?? ''} filter ${node.Filter ?? ''}`);
  // A bitmap scan fetches every row of the key before anything can stop it.
  if (onTable && (node['Recheck Cond'] ?? '').includes('message_key'))
    found.push(`${node['Node Type']} recheck ${node['Recheck Cond'] ?? ''}`);
  // The index of waiting messages read other than for one key: every waiting row, which the
  // promotion's update did once per candidate when the statistics said none were waiting.
  if (
    waitingScans &&
    !runsOnce &&
    onTable &&
    (node['Index Name'] ?? '').endsWith('_waiting_idx') &&
    !(node['Index Cond'] ?? '').includes('message_key')
  )
    found.push(`${node['Node Type']} ${node['Index Name'] ?? ''} without a key`);
  for (const child of node.Plans ?? []) pgKeyFilters(child, table, waitingScans, found, runsOnce);
  return found;
}

/**
 * PostgreSQL: a nested loop that reads a CTE again for each row of its outer side, where that
 * side can have more than one row. The planner picks one when it believes the outer side has a
 * row or two: it estimates a CTE's rows without statistics, and a `LIMIT $n` without its value
 * in a generic plan. A claim's CTEs hold hundreds of rows, so such a loop does hundreds of
 * thousands of comparisons: a run check written as a semi-join of the locked rows with
 * themselves took 19 ms of a 45 ms claim in the generic plan of a drain (an `EXPLAIN` with a
 * batch's values, planned for them, showed it hashed).
 */
function pgCteRescans(node: PgPlanNode, found: string[] = []): string[] {
  const [outer, inner] = node.Plans ?? [];
  const reread = inner?.['Node Type'] === 'Materialize' ? inner.Plans?.[0] : inner;
  const oneRow =
    outer !== undefined &&
    (outer['Node Type'] === 'Result' ||
      (outer['Node Type'] === 'Aggregate' && outer.Strategy === 'Plain'));
  if (node['Node Type'] === 'Nested Loop' && reread?.['Node Type'] === 'CTE Scan' && !oneRow)
    found.push(`Nested Loop reads CTE ${reread['CTE Name'] ?? '?'} once per outer row`);
  for (const child of node.Plans ?? []) pgCteRescans(child, found);
  return found;
}

/**
 * With `waitingScans` false, a statement may read the whole waiting index (the orphan lookup);
 * with `cteRescans`, its plans may not read a CTE once per row of another (the claim's, whose
 * CTEs hold a batch, and the park's, whose keys were tested against every pending row).
 * Each statement is checked in the plan planned for these values (`EXPLAIN` with parameters)
 * and, with `plans` 'generic' (the dispatch's statements), in the generic plan the store runs
 * them under (`plan_cache_mode`, set in the store's opening), made once per connection from
 * whatever the statistics say at that moment.
 */
async function pgPlanProblems(
  ds: DataSource,
  sql: string,
  params: unknown[],
  table: string,
  {
    waitingScans = true,
    plans = 'generic',
    cteRescans = false,
  }: { waitingScans?: boolean; plans?: 'generic' | 'custom'; cteRescans?: boolean } = {},
) {
  // Explained in a transaction rolled back: EXPLAIN of an UPDATE without ANALYZE changes
  // nothing, but the claim's statement is a data-modifying CTE and stays harmless this way.
  const runner = ds.createQueryRunner();
  const problems: string[] = [];
  try {
    await runner.startTransaction();
    // As the store runs these statements: its opening's settings, generic plans included.
    for (const statement of postgresOpening(60_000, 1, [], plans)) await runner.query(statement);
    const explained: [string, PgExplained][] = [
      ['custom', (await runner.query(`EXPLAIN (FORMAT JSON) ${sql}`, params)) as PgExplained],
    ];
    if (plans === 'generic') {
      await runner.query(`PREPARE plan_test AS ${sql}`);
      const sent = `EXPLAIN (FORMAT JSON) EXECUTE plan_test(${params.map(pgLiteral).join(', ')})`;
      explained.push(['generic', (await runner.query(sent)) as PgExplained]);
    }
    for (const [which, rows] of explained) {
      const plan = rows[0]?.['QUERY PLAN'][0].Plan;
      if (plan === undefined) throw new Error(`no ${which} plan for ${sql}`);
      problems.push(
        ...[
          ...pgKeyFilters(plan, table, waitingScans),
          ...(cteRescans ? pgCteRescans(plan) : []),
        ].map((p) => `${which}: ${p}`),
      );
    }
    return problems;
  } finally {
    await runner.rollbackTransaction();
    await runner.query('DEALLOCATE ALL');
    await runner.release();
  }
}

type PgExplained = { 'QUERY PLAN': [{ Plan: PgPlanNode }] }[];

/** A test value as an untyped SQL literal (strings here are test constants without quotes). */
function pgLiteral(value: unknown): string {
  if (typeof value === 'number') return String(value);
  if (Array.isArray(value)) return `'{${value.map((v) => `"${String(v)}"`).join(',')}}'`;
  return `'${String(value)}'`;
}

/** MariaDB: every access to the table that reads by key uses the key index. */
async function mysqlPlanProblems(
  ds: DataSource,
  sql: string,
  params: unknown[],
  names: OutboxTableNames,
  aliases: readonly string[],
): Promise<string[]> {
  const rows = await ds.query<{ table: string; key: string | null; type: string }[]>(
    `EXPLAIN ${sql}`,
    params,
  );
  const keyIndex = `${names.tableName}_key_idx`;
  return rows
    .filter((r) => aliases.includes(r.table) && r.key !== keyIndex)
    .map((r) => `${r.table}: ${r.type} ${r.key ?? '(no index)'}`);
}

/** SQLite: every lookup of the aliases searches the key index. */
async function sqlitePlanProblems(
  ds: DataSource,
  sql: string,
  params: unknown[],
  names: OutboxTableNames,
  aliases: readonly string[],
): Promise<string[]> {
  const rows = await ds.query<{ detail: string }[]>(`EXPLAIN QUERY PLAN ${sql}`, params);
  const keyIndex = `${names.tableName}_key_idx`;
  return rows
    .map((r) => r.detail)
    .filter((d) => aliases.some((a) => new RegExp(`^(SEARCH|SCAN) ${a} `).test(d)))
    .filter((d) => !d.includes(`INDEX ${keyIndex} (message_key=`));
}

for (const [db, stats] of TEST_DATABASES.flatMap((d) =>
  (['one key fills the table', 'nearly empty'] as const).map((st) => [d, st] as const),
)) {
  describeWith(
    db.service === null ? [] : [db.service],
    `claim plans, statistics taken when ${stats} [${db.name}]`,
    () => {
      let ds: DataSource;
      let table: string;
      let names: OutboxTableNames;
      let store: OutboxStore;

      beforeAll(async () => {
        table = uniqueTable('outbox_plan');
        ds = await db.open(table);
        names = tableNamesFor(outboxDialectOf(ds.options.type), { tableName: table });
        await load(ds, names, stats);
        store = await createOutboxStore(
          typeormSqlPort(ds),
          {
            tableName: table,
            schema: null,
            ordering: { enabled: true, onDeadLetter: 'block', maxRun: 1 },
          },
          { enabled: true, notify: false },
        );
      }, 120_000);

      afterAll(async () => {
        await db.close(ds, table);
      });

      it('probes the key index for the head of a key in claim, park, promote and orphan lookups', async () => {
        const keys = [STUCK, 'k1', 'k2'];
        let problems: Record<string, string[]>;
        switch (db.name) {
          case 'postgres':
            problems = {
              claim: await pgPlanProblems(
                ds,
                postgresClaim(names, POLICY),
                [
                  'plan-test',
                  '00000000-0000-4000-8000-000000000000',
                  60_000,
                  20,
                  claimWindow(20),
                  50,
                ],
                table,
                { cteRescans: true },
              ),
              park: await pgPlanProblems(ds, postgresPark(names, POLICY), [keys], table, {
                cteRescans: true,
              }),
              promote: [
                ...(await pgPlanProblems(ds, postgresPromote(names, POLICY), [keys, 50], table)),
                // With schema step 5's index of waiting messages, which the table has.
                ...(await pgPlanProblems(
                  ds,
                  postgresPromote(names, POLICY, true),
                  [keys, 50],
                  table,
                )),
              ],
              // Every waiting key is what it looks for: reading the waiting index whole is its job.
              // Not a dispatch statement: the store plans it per call.
              orphans: await pgPlanProblems(ds, postgresOrphanKeys(names, POLICY), [100], table, {
                waitingScans: false,
                plans: 'custom',
              }),
            };
            break;
          case 'mariadb':
            problems = {
              claim: [
                ...(await mysqlPlanProblems(
                  ds,
                  mysqlClaimWindow(names, POLICY),
                  [claimWindow(20)],
                  names,
                  ['e'],
                )),
                // The rows of the runs behind the heads, for keys seen more than once.
                ...(await mysqlPlanProblems(
                  ds,
                  mysqlKeyRows(names, POLICY, keys.length),
                  mysqlKeyRowsParams(
                    POLICY,
                    keys.map((key) => ({ key, after: 0, limit: POLICY.maxRun })),
                  ),
                  names,
                  [table],
                )),
              ],
              park: await mysqlPlanProblems(
                ds,
                mysqlFirstBlocking(names, POLICY, keys.length),
                keys,
                names,
                [table],
              ),
              promote: [
                ...(await mysqlPlanProblems(
                  ds,
                  mysqlFirstWaiting(names, keys.length),
                  keys,
                  names,
                  [table],
                )),
                ...(await mysqlPlanProblems(
                  ds,
                  mysqlStillHeld(names, POLICY, keys.length),
                  keys.flatMap((k) => [k, 1_000_000]),
                  names,
                  [table],
                )),
              ],
              orphans: await mysqlPlanProblems(ds, mysqlOrphanKeys(names, POLICY), [100], names, [
                'e',
              ]),
            };
            break;
          case 'sqlite': {
            const json = JSON.stringify(keys);
            problems = {
              claim: await sqlitePlanProblems(
                ds,
                sqliteClaimWindow(names, POLICY),
                [claimWindow(20)],
                names,
                ['e'],
              ),
              // The updated rows themselves too: under stale statistics it scanned the table.
              park: await sqlitePlanProblems(ds, sqlitePark(names, POLICY), [json], names, [
                'e',
                table,
              ]),
              promote: await sqlitePlanProblems(
                ds,
                sqlitePromote(names, POLICY),
                [json, POLICY.maxRun - 1],
                names,
                ['w', 'e', 'x'],
              ),
              orphans: await sqlitePlanProblems(ds, sqliteOrphanKeys(names, POLICY), [100], names, [
                'e',
              ]),
            };
            break;
          }
        }
        expect(problems).toEqual({ claim: [], park: [], promote: [], orphans: [] });
      });

      it('claims the heads of the keys, past a blocked key or a long one', async () => {
        const batch = await store.claim({ limit: 20, owner: 'plan-test', leaseMs: 60_000 });
        if (stats === 'one key fills the table') {
          expect(batch.records.some((r) => r.key === STUCK)).toBe(false);
          // One message per key, each the first of its key (keys k0…k29 have two each).
          expect(batch.records).toHaveLength(20);
          expect(new Set(batch.records.map((r) => r.key)).size).toBe(20);
        } else {
          // The window holds 'first' and the head of 'big', then big's followers.
          expect(batch.records.map((r) => r.key)).toEqual(['first', BIG]);
          // big's followers wait for its head, in flight in this batch.
          expect(batch.blockedKeys).toEqual([]);
          expect(batch.inFlightKeys).toBe(1);
        }
      });
    },
  );
}
