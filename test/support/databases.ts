import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  Column,
  DataSource,
  Entity,
  PrimaryGeneratedColumn,
  type DataSourceOptions,
} from 'typeorm';
import { ensureOutboxTable } from '../../lib/typeorm/typeorm-tables';
import { testPartitioning } from './partitioned-tables';
import { SERVICES, type ServiceName } from './services';
import { messageIdBytes, messageIdText } from '../../lib/store/rows/message-id-codec';
import { outboxDialectOf } from '../../lib/store/schema/outbox-table-ddl';
import { OUTBOX_STEP_OPTIONS } from '../../lib/store/schema/schema-steps';

/** A business row written next to outbox messages in the tests' transactions. */
@Entity('outbox_test_order')
export class TestOrder {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'varchar', length: 64 })
  customer!: string;
}

export interface TestDatabase {
  readonly name: 'postgres' | 'mariadb' | 'sqlite';
  readonly service: ServiceName | null;
  /** A fresh, initialised DataSource with an outbox table of its own (`table`). */
  open(table: string): Promise<DataSource>;
  /** Drops the outbox table and closes the DataSource. */
  close(dataSource: DataSource, table: string): Promise<void>;
}

const sqliteDirs = new Map<DataSource, string>();

/**
 * Where the test PostgreSQL or MariaDB server is and how to log in (from the environment, with the
 * local defaults); the bench uses it too, with a database of its own.
 */
export function serverConnection(name: 'postgres' | 'mariadb') {
  return name === 'postgres'
    ? {
        type: 'postgres' as const,
        host: SERVICES.postgres.host,
        port: SERVICES.postgres.port,
        username: process.env.PGUSER ?? 'postgres',
        password: process.env.PGPASSWORD,
        database: process.env.PGDATABASE ?? 'test',
      }
    : {
        type: 'mariadb' as const,
        host: SERVICES.mariadb.host,
        port: SERVICES.mariadb.port,
        username: process.env.MYSQL_USER ?? 'root',
        password: process.env.MYSQL_PASSWORD ?? '',
        database: process.env.MYSQL_DATABASE ?? 'test',
      };
}

/**
 * Connection options of the test PostgreSQL or MariaDB server, with the test entity and a pool of
 * 20 unless `extra` says otherwise.
 */
export function serverOptions(
  name: 'postgres' | 'mariadb',
  extra: { poolSize?: number; synchronize?: boolean; extra?: Record<string, unknown> } = {},
): DataSourceOptions {
  return { ...serverConnection(name), entities: [TestOrder], poolSize: 20, ...extra };
}

const ALL_DATABASES: readonly TestDatabase[] = [
  {
    name: 'postgres',
    service: 'postgres',
    async open(table) {
      const ds = new DataSource(serverOptions('postgres', { synchronize: true }));
      await ds.initialize();
      await ensureOutboxTable(ds, {
        tableName: table,
        ...testPartitioning(ds),
        with: OUTBOX_STEP_OPTIONS,
      });
      return ds;
    },
    async close(ds, table) {
      await ds.query(`DROP TABLE IF EXISTS "${table}_attempts"`);
      await ds.query(`DROP TABLE IF EXISTS "${table}"`);
      await ds.query(`DROP TABLE IF EXISTS "${table}_ids"`);
      await ds.query(`DROP TABLE IF EXISTS "${table}_key_seq"`);
      await ds.destroy();
    },
  },
  {
    name: 'mariadb',
    service: 'mariadb',
    async open(table) {
      const ds = new DataSource(serverOptions('mariadb', { synchronize: true }));
      await ds.initialize();
      await ensureOutboxTable(ds, {
        tableName: table,
        ...testPartitioning(ds),
        with: OUTBOX_STEP_OPTIONS,
      });
      return ds;
    },
    async close(ds, table) {
      await ds.query(`DROP TABLE IF EXISTS \`${table}_attempts\``);
      await ds.query(`DROP TABLE IF EXISTS \`${table}_key_lock\``);
      await ds.query(`DROP TABLE IF EXISTS \`${table}\``);
      await ds.query(`DROP TABLE IF EXISTS \`${table}_ids\``);
      await ds.query(`DROP TABLE IF EXISTS \`${table}_key_seq\``);
      await ds.destroy();
    },
  },
  {
    name: 'sqlite',
    service: null,
    async open(table) {
      const dir = mkdtempSync(join(tmpdir(), 'outbox-sqlite-'));
      const ds = new DataSource({
        type: 'better-sqlite3',
        database: join(dir, 'test.sqlite'),
        entities: [TestOrder],
        synchronize: true,
        enableWAL: true,
      });
      await ds.initialize();
      await ensureOutboxTable(ds, { tableName: table, with: OUTBOX_STEP_OPTIONS });
      sqliteDirs.set(ds, dir);
      return ds;
    },
    async close(ds) {
      await ds.destroy();
      const dir = sqliteDirs.get(ds);
      if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
    },
  },
];

type DatabaseName = TestDatabase['name'];

// `mysql` is what people type; the suites' name for the dialect is the server they run on.
const ALIASES: Readonly<Record<string, DatabaseName>> = {
  postgres: 'postgres',
  postgresql: 'postgres',
  mysql: 'mariadb',
  mariadb: 'mariadb',
  sqlite: 'sqlite',
};

/** The names OUTBOX_TEST_DATABASES selects (a comma list), or every database when it is unset. */
function selectedNames(): ReadonlySet<DatabaseName> {
  const raw = process.env.OUTBOX_TEST_DATABASES?.trim();
  if (raw === undefined || raw === '') return new Set(ALL_DATABASES.map((db) => db.name));
  const names = raw.split(',').map((part) => part.trim().toLowerCase());
  const unknown = names.filter((name) => ALIASES[name] === undefined);
  // A typo must not quietly run nothing.
  if (unknown.length > 0) {
    throw new Error(
      `OUTBOX_TEST_DATABASES: unknown database(s) ${unknown.join(', ')} (use postgres, mysql, sqlite)`,
    );
  }
  return new Set(names.map((name) => ALIASES[name] as DatabaseName));
}

/**
 * The databases the database-parameterised suites run on: all three, or those named in
 * OUTBOX_TEST_DATABASES (`OUTBOX_TEST_DATABASES=postgres`, `=mysql,sqlite`).
 */
const selected = selectedNames();
export const TEST_DATABASES: readonly TestDatabase[] = ALL_DATABASES.filter((db) =>
  selected.has(db.name),
);

/** One database by name, for a suite written for that database; not narrowed by the variable. */
export function testDatabase(name: DatabaseName): TestDatabase {
  const db = ALL_DATABASES.find((candidate) => candidate.name === name);
  if (db === undefined) throw new Error(`no test database ${name}`);
  return db;
}

let counter = 0;
// Jest loads this module again for each spec file: a spec run twice in one process (by two
// projects, npm run test:modes) must not meet the tables its earlier run left.
const LOAD_TAG = randomBytes(2).toString('hex');
/** A table name unique to this test process, spec file and call. */
export function uniqueTable(prefix = 'outbox_t'): string {
  counter += 1;
  return `${prefix}_${process.pid}_${LOAD_TAG}_${counter}`;
}

/** Reads the outbox rows in id order, with columns normalised across dialects. */
export function readOutbox(ds: DataSource, table: string): Promise<OutboxRow[]> {
  return readRows(ds, table, 'id', 'id', 'locked_by');
}

/**
 * The archive `<table>_archive` (cleaner.archive), in the order rows were moved there, as the
 * outbox rows they were: `id` is the row's id in the outbox.
 */
export function readArchive(ds: DataSource, table: string): Promise<OutboxRow[]> {
  return readRows(ds, `${table}_archive`, 'outbox_id', 'archive_id', 'NULL');
}

async function readRows(
  ds: DataSource,
  table: string,
  id: string,
  order: string,
  lockedBy: string,
): Promise<OutboxRow[]> {
  const q =
    ds.options.type === 'postgres'
      ? `"${table}"`
      : ds.options.type === 'better-sqlite3'
        ? `"${table}"`
        : `\`${table}\``;
  const payload =
    ds.options.type === 'postgres'
      ? 'payload::text AS payload, headers::text AS headers, message_id::text AS message_id'
      : 'payload, headers, message_id';
  const rows = await ds.query<RawOutboxRow[]>(
    `SELECT ${id} AS id, ${payload}, topic, message_key, event_type, status, attempts, last_error, ${lockedBy} AS locked_by FROM ${q} ORDER BY ${order}`,
  );
  return rows.map((r) => ({
    id: String(r.id),
    messageId: messageIdText(r.message_id),
    topic: String(r.topic),
    key: r.message_key,
    type: String(r.event_type),
    payload: JSON.parse(String(r.payload)) as unknown,
    headers: JSON.parse(String(r.headers)) as Record<string, string>,
    status: String(r.status),
    attempts: Number(r.attempts),
    lastError: r.last_error,
    lockedBy: r.locked_by,
  }));
}

/** A row of an outbox table's attempt history, normalised across dialects. */
export interface AttemptHistoryRow {
  messageId: string;
  attempt: number;
  outcome: string;
  lockedBy: string | null;
  errorClass: string | null;
  error: string | null;
}

/** Reads the attempt history `<table>_attempts` in the order it was written. */
export async function readAttempts(ds: DataSource, table: string): Promise<AttemptHistoryRow[]> {
  const mysql = ds.options.type === 'mariadb' || ds.options.type === 'mysql';
  const q = mysql ? `\`${table}_attempts\`` : `"${table}_attempts"`;
  const messageId = ds.options.type === 'postgres' ? 'message_id::text' : 'message_id';
  const rows = await ds.query<Record<string, unknown>[]>(
    `SELECT ${messageId} AS message_id, attempt, outcome, locked_by, error_class, error FROM ${q} ORDER BY id`,
  );
  const text = (v: unknown): string | null => (typeof v === 'string' ? v : null);
  return rows.map((r) => ({
    messageId: messageIdText(r.message_id),
    attempt: Number(r.attempt),
    outcome: String(r.outcome),
    lockedBy: text(r.locked_by),
    errorClass: text(r.error_class),
    error: text(r.error),
  }));
}

/** Message id → status, in id order, for the rows of a (possibly schema-qualified) table. */
export async function readStatuses(
  ds: DataSource,
  qualifiedTable: string,
): Promise<Map<string, string>> {
  const messageId = ds.options.type === 'postgres' ? 'message_id::text' : 'message_id';
  const rows = await ds.query<{ message_id: string | Uint8Array; status: string }[]>(
    `SELECT ${messageId} AS message_id, status FROM ${qualifiedTable} ORDER BY id`,
  );
  return new Map(rows.map((r) => [messageIdText(r.message_id), String(r.status)]));
}

interface RawOutboxRow {
  id: string | number;
  message_id: string | Uint8Array;
  topic: string;
  message_key: string | null;
  event_type: string;
  payload: string;
  headers: string;
  status: string;
  attempts: string | number;
  last_error: string | null;
  locked_by: string | null;
}

export interface OutboxRow {
  id: string;
  messageId: string;
  topic: string;
  key: string | null;
  type: string;
  payload: unknown;
  headers: Record<string, string>;
  status: string;
  attempts: number;
  lastError: string | null;
  lockedBy: string | null;
}

/**
 * A message id as a test's statement binds it against a table the outbox made: the UUID's 16
 * bytes on MySQL/MariaDB (BINARY(16)), the text elsewhere.
 */
export function storedId(databaseType: string, id: string): string | Buffer {
  return outboxDialectOf(databaseType) === 'mysql' ? messageIdBytes(id) : id;
}

/** The database's URL as the `outbox` command takes it in DATABASE_URL. */
export function databaseUrlFor(db: TestDatabase, ds: DataSource): string {
  switch (db.name) {
    case 'postgres': {
      const user = encodeURIComponent(process.env.PGUSER ?? 'postgres');
      const pw = process.env.PGPASSWORD;
      const auth = pw === undefined ? user : `${user}:${encodeURIComponent(pw)}`;
      return `postgres://${auth}@${SERVICES.postgres.host}:${SERVICES.postgres.port}/${process.env.PGDATABASE ?? 'test'}`;
    }
    case 'mariadb': {
      const user = encodeURIComponent(process.env.MYSQL_USER ?? 'root');
      const pw = process.env.MYSQL_PASSWORD ?? '';
      const auth = pw === '' ? user : `${user}:${encodeURIComponent(pw)}`;
      return `mariadb://${auth}@${SERVICES.mariadb.host}:${SERVICES.mariadb.port}/${process.env.MYSQL_DATABASE ?? 'test'}`;
    }
    case 'sqlite':
      return `sqlite:${(ds.options as { database: string }).database}`;
  }
}
