/** Database connections, outbox tables and backlog seeding for every dialect the bench uses. */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Pool, type PgConfig } from './pg';
import {
  Column,
  DataSource,
  Entity,
  PrimaryGeneratedColumn,
  type Logger as TypeOrmLogger,
} from 'typeorm';
import { ensureOutboxTable } from '../../lib/typeorm/typeorm-tables';
import { serverConnection } from '../../test/support/databases';
import { KEYS, PAYLOAD_BYTES, SERVICES } from './config';
import { sleep } from '../../test/support/wait-for';
import { OUTBOX_STEP_OPTIONS } from '../../lib/store/schema/schema-steps';

/** The business row of P5's transactions. */
@Entity('bench_order')
export class BenchOrder {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'varchar', length: 64 })
  customer!: string;

  @Column({ type: 'int' })
  total!: number;
}

export function pgConfig(database: string = SERVICES.postgres.database): PgConfig {
  const { host, port, username, password } = serverConnection('postgres');
  return { host, port, user: username, password, database };
}

/** Creates the bench database when it does not exist (its statistics then only count the bench). */
export async function ensurePgDatabase(): Promise<void> {
  const name = SERVICES.postgres.database;
  const admin = new Client(pgConfig('postgres'));
  await admin.connect();
  try {
    const { rowCount } = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (rowCount === 0) await admin.query(`CREATE DATABASE "${name.replace(/"/g, '""')}"`);
  } finally {
    await admin.end();
  }
}

export async function ensureMariaDatabase(): Promise<void> {
  // No database yet: connect to the server only.
  const { database: _none, ...server } = serverConnection('mariadb');
  const ds = new DataSource(server);
  await ds.initialize();
  try {
    await ds.query(`CREATE DATABASE IF NOT EXISTS \`${SERVICES.mariadb.database}\``);
  } finally {
    await ds.destroy();
  }
}

/** Counts every statement TypeORM runs (P8's client-side query count). */
export class CountingLogger implements TypeOrmLogger {
  count = 0;
  readonly texts = new Map<string, number>();
  logQuery(query: string): void {
    this.count++;
    const head = query.replace(/\s+/g, ' ').slice(0, 60);
    this.texts.set(head, (this.texts.get(head) ?? 0) + 1);
  }
  logQueryError(): void {}
  logQuerySlow(): void {}
  logSchemaBuild(): void {}
  logMigration(): void {}
  log(): void {}
}

export async function openPostgres(
  options: { poolSize?: number; logger?: TypeOrmLogger } = {},
): Promise<DataSource> {
  const ds = new DataSource({
    ...serverConnection('postgres'),
    database: SERVICES.postgres.database,
    entities: [BenchOrder],
    synchronize: true,
    poolSize: options.poolSize ?? 20,
    ...(options.logger === undefined ? {} : { logging: ['query'], logger: options.logger }),
  });
  await ds.initialize();
  return ds;
}

export async function openMaria(): Promise<DataSource> {
  const ds = new DataSource({
    ...serverConnection('mariadb'),
    database: SERVICES.mariadb.database,
    entities: [BenchOrder],
    synchronize: true,
    poolSize: 20,
  });
  await ds.initialize();
  return ds;
}

const sqliteDirs = new Map<DataSource, string>();

export async function openSqlite(): Promise<DataSource> {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-bench-'));
  const ds = new DataSource({
    type: 'better-sqlite3',
    database: join(dir, 'bench.sqlite'),
    entities: [BenchOrder],
    synchronize: true,
    enableWAL: true,
  });
  await ds.initialize();
  sqliteDirs.set(ds, dir);
  return ds;
}

export async function closeDataSource(ds: DataSource): Promise<void> {
  if (ds.isInitialized) await ds.destroy();
  const dir = sqliteDirs.get(ds);
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
}

export type Dialect = 'postgres' | 'mariadb' | 'sqlite';

export function dialectOf(ds: DataSource): Dialect {
  const type = ds.options.type;
  return type === 'postgres'
    ? 'postgres'
    : type === 'mariadb' || type === 'mysql'
      ? 'mariadb'
      : 'sqlite';
}

export function quoteTable(ds: DataSource, table: string): string {
  return dialectOf(ds) === 'mariadb' ? `\`${table}\`` : `"${table}"`;
}

/** A fresh, empty outbox table (dropped first if it exists). */
export async function resetOutboxTable(ds: DataSource, table: string): Promise<void> {
  await dropOutboxTable(ds, table);
  await ensureOutboxTable(ds, { tableName: table, with: OUTBOX_STEP_OPTIONS });
}

export async function dropOutboxTable(ds: DataSource, table: string): Promise<void> {
  await ds.query(`DROP TABLE IF EXISTS ${quoteTable(ds, `${table}_attempts`)}`);
  if (dialectOf(ds) === 'mariadb') await ds.query(`DROP TABLE IF EXISTS \`${table}_key_lock\``);
  await ds.query(`DROP TABLE IF EXISTS ${quoteTable(ds, table)}`);
  // The guard of a partitioned table (P7, P11, P12).
  await ds.query(`DROP TABLE IF EXISTS ${quoteTable(ds, `${table}_ids`)}`);
  // The claim check's payloads (P23).
  await ds.query(`DROP TABLE IF EXISTS ${quoteTable(ds, `${table}_claim_checks`)}`);
  // The erasure's key tables (P24).
  await ds.query(`DROP TABLE IF EXISTS ${quoteTable(ds, `${table}_subject_uses`)}`);
  await ds.query(`DROP TABLE IF EXISTS ${quoteTable(ds, `${table}_subject_keys`)}`);
  // The counters of ordering.sequence (P21).
  await ds.query(`DROP TABLE IF EXISTS ${quoteTable(ds, `${table}_key_seq`)}`);
  // The partition owners and dispatchers (dispatcher.claims 'partitions', P1).
  await ds.query(`DROP TABLE IF EXISTS ${quoteTable(ds, `${table}_owners`)}`);
  await ds.query(`DROP TABLE IF EXISTS ${quoteTable(ds, `${table}_dispatchers`)}`);
}

/** Empties the table (and restarts its ids) between runs. */
export async function truncateOutbox(ds: DataSource, table: string): Promise<void> {
  switch (dialectOf(ds)) {
    case 'postgres':
      await ds.query(`TRUNCATE ${quoteTable(ds, table)} RESTART IDENTITY`);
      break;
    case 'mariadb':
      await ds.query(`TRUNCATE TABLE ${quoteTable(ds, table)}`);
      break;
    case 'sqlite':
      await ds.query(`DELETE FROM ${quoteTable(ds, table)}`);
      break;
  }
}

/** The padding that makes each payload about {@link PAYLOAD_BYTES} bytes of JSON. */
export const PAD = 'x'.repeat(PAYLOAD_BYTES - 48);

/** The JSON payload of message `seq` (same shape the SQL seeders write). */
export function payloadOf(seq: number, key: string): string {
  return `{"seq":${seq},"key":"${key}","pad":"${PAD}"}`;
}

export const keyOf = (seq: number, keys = KEYS): string => `k${seq % keys}`;

/**
 * Writes `count` pending messages (seq `from`…`from+count-1`, key `k<seq % keys>`, 1 KiB JSON)
 * in one statement, the way a backlog of committed messages looks to a dispatcher. `status`
 * 'delivered' writes history instead.
 */
export async function seedOutbox(
  ds: DataSource,
  table: string,
  count: number,
  options: {
    from?: number;
    topic?: string;
    status?: 'pending' | 'delivered';
    keys?: number;
    /** Created (and delivered) this many days ago, instead of now (PostgreSQL, MariaDB). */
    ageDays?: number;
  } = {},
): Promise<void> {
  const from = options.from ?? 1;
  const to = from + count - 1;
  const topic = options.topic ?? 'bench';
  const keys = options.keys ?? KEYS;
  const delivered = options.status === 'delivered';
  const age = options.ageDays ?? 0;
  const t = quoteTable(ds, table);
  switch (dialectOf(ds)) {
    case 'postgres': {
      // In slices, so a million-row history does not become one giant transaction.
      for (let start = from; start <= to; start += 100_000) {
        const end = Math.min(to, start + 99_999);
        await ds.query(
          `INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, headers${delivered ? ', status, delivered_at' : ''}, created_at)
SELECT gen_random_uuid(), $1, 'k' || (g % $2), 'order.created', ('{"seq":' || g || ',"key":"k' || (g % $2) || '","pad":"' || $3 || '"}')::json, '{}'${delivered ? `, 'delivered', now() - interval '${age} days'` : ''}, now() - interval '${age} days'
FROM generate_series($4::int, $5::int) AS g ORDER BY g`,
          [topic, keys, PAD, start, end],
        );
      }
      break;
    }
    case 'mariadb': {
      for (let start = from; start <= to; start += 50_000) {
        const end = Math.min(to, start + 49_999);
        await ds.query(
          `INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, headers${delivered ? ', status, delivered_at' : ''}, created_at)
SELECT UNHEX(REPLACE(UUID(), '-', '')), ?, CONCAT('k', seq % ?), 'order.created', CONCAT('{"seq":', seq, ',"key":"k', seq % ?, '","pad":"', ?, '"}'), '{}'${delivered ? `, 'delivered', UTC_TIMESTAMP(6) - INTERVAL ${age} DAY` : ''}, UTC_TIMESTAMP(6) - INTERVAL ${age} DAY
FROM seq_${start}_to_${end} ORDER BY seq`,
          [topic, keys, keys, PAD],
        );
      }
      break;
    }
    case 'sqlite': {
      await ds.query(
        `WITH RECURSIVE g(x) AS (SELECT CAST(? AS INTEGER) UNION ALL SELECT x + 1 FROM g WHERE x < ?)
INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, headers${delivered ? ', status, delivered_at' : ''})
SELECT lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-' || hex(randomblob(2)) || '-' || hex(randomblob(2)) || '-' || hex(randomblob(6))),
  ?, 'k' || (x % CAST(? AS INTEGER)), 'order.created', '{"seq":' || x || ',"key":"k' || (x % CAST(? AS INTEGER)) || '","pad":"' || ? || '"}', '{}'${delivered ? `, 'delivered', strftime('%Y-%m-%d %H:%M:%f', 'now')` : ''}
FROM g`,
        [from, to, topic, keys, keys, PAD],
      );
      break;
    }
  }
}

/** Refreshes planner statistics (and the visibility map on PostgreSQL) after seeding. */
export async function analyse(ds: DataSource, table: string): Promise<void> {
  switch (dialectOf(ds)) {
    case 'postgres':
      await ds.query(`VACUUM ANALYZE ${quoteTable(ds, table)}`);
      break;
    case 'mariadb':
      await ds.query(`ANALYZE TABLE ${quoteTable(ds, table)}`);
      break;
    case 'sqlite':
      await ds.query('ANALYZE');
      break;
  }
}

export async function countByStatus(
  ds: DataSource,
  table: string,
): Promise<Record<string, number>> {
  const rows = await ds.query<{ status: string; n: string | number }[]>(
    `SELECT status, count(*) AS n FROM ${quoteTable(ds, table)} GROUP BY status`,
  );
  return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
}

export async function pendingCount(ds: DataSource, table: string): Promise<number> {
  const rows = await ds.query<{ n: string | number }[]>(
    `SELECT count(*) AS n FROM ${quoteTable(ds, table)} WHERE status = 'pending'`,
  );
  return Number(rows[0]?.n ?? 0);
}

/**
 * Resolves once every keyed message of a PostgreSQL outbox table is delivered, looking every
 * `pollMs` through the key index (its predicate is the question asked, so each look reads
 * one index entry, not the table), for dispatchers that run on their own.
 */
export async function untilDelivered(
  ds: DataSource,
  table: string,
  { pollMs = 5, timeoutMs = 600_000 } = {},
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const sql = `SELECT EXISTS (SELECT 1 FROM ${quoteTable(ds, table)} WHERE status <> 'delivered' AND message_key IS NOT NULL) AS left`;
  for (;;) {
    const rows = await ds.query<{ left: boolean }[]>(sql);
    if (rows[0]?.left !== true) return;
    if (Date.now() > deadline) throw new Error(`${table} was not delivered within ${timeoutMs} ms`);
    await sleep(pollMs);
  }
}

export function pgPool(max = 10): Pool {
  return new Pool({ ...pgConfig(), max });
}

/**
 * Drops what killed bench runs left behind in the bench database: tables, publications and — above
 * all — logical replication slots (a forgotten slot retains WAL forever). Only objects of runs
 * whose process no longer exists are touched; a concurrent run keeps its own.
 */
export async function dropStaleRunObjects(log: (line: string) => void): Promise<void> {
  const client = new Client(pgConfig());
  await client.connect();
  const dead = (name: string): boolean => {
    const pid = /_r(\d+)$/.exec(name)?.[1];
    return pid !== undefined && !existsSync(`/proc/${pid}`);
  };
  try {
    // pg-transactional-outbox's slot (P1), and the log-tailing scenarios' (L1–L4: named after
    // their table, bench_l…_r<pid>); only inactive ones, of runs that no longer exist.
    const slots = await client.query<{ slot_name: string }>(
      `SELECT slot_name FROM pg_replication_slots WHERE (slot_name LIKE 'pgto\\_bench\\_slot\\_r%' OR slot_name LIKE 'bench\\_l%\\_r%') AND NOT active`,
    );
    for (const { slot_name } of slots.rows.filter((r) => dead(r.slot_name))) {
      await client.query('SELECT pg_drop_replication_slot($1)', [slot_name]);
      log(`dropped the replication slot ${slot_name} of a bench run that no longer exists`);
    }
    const pubs = await client.query<{ pubname: string }>(
      `SELECT pubname FROM pg_publication WHERE pubname LIKE 'pgto\\_bench\\_pub\\_r%' OR pubname LIKE 'bench\\_pub\\_l%\\_r%'`,
    );
    for (const { pubname } of pubs.rows.filter((r) => dead(r.pubname)))
      await client.query(`DROP PUBLICATION IF EXISTS "${pubname}"`);
    const tables = await client.query<{ tablename: string }>(
      `SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND (tablename LIKE 'bench\\_%\\_r%' OR tablename LIKE 'pgto\\_outbox\\_r%')`,
    );
    for (const { tablename } of tables.rows.filter((r) => dead(r.tablename)))
      await client.query(`DROP TABLE IF EXISTS "${tablename}"`);
  } finally {
    await client.end();
  }
}

/** Runs `measure` on the run's PostgreSQL, then on a MariaDB connection of its own. */
export async function onPostgresAndMaria(
  pg: DataSource,
  measure: (db: DataSource) => Promise<void>,
): Promise<void> {
  await measure(pg);
  const maria = await openMaria();
  try {
    await measure(maria);
  } finally {
    await closeDataSource(maria);
  }
}
