import type { OutboxPublisher, OutboxRecord, PublishOutcome } from 'nestjs-outbox';
import type { DataSource, EntityManager } from 'typeorm';
import { waitFor } from './wait-for';

// Helpers of the inbox suite: a business table per test (so counts are never shared with other
// suites running against the same database), raw reads of the inbox table, and lock-wait probes.

/** A promise the test resolves or rejects when it chooses. */
export class Gate {
  readonly promise: Promise<void>;
  open!: () => void;
  fail!: (error: Error) => void;

  constructor() {
    this.promise = new Promise<void>((resolve, reject) => {
      this.open = resolve;
      this.fail = reject;
    });
  }
}

export interface Tracked<T> {
  readonly promise: Promise<T>;
  settled(): boolean;
}

/** Tracks whether a promise has settled, without awaiting it. */
export function track<T>(promise: Promise<T>): Tracked<T> {
  let done = false;
  const watched = promise.finally(() => {
    done = true;
  });
  // The caller awaits `promise`; this copy only flips the flag.
  watched.catch(() => undefined);
  return { promise, settled: () => done };
}

/** Quotes a test-generated (already safe) identifier for the DataSource's dialect. */
export function q(ds: DataSource, name: string): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw new Error(`unsafe test identifier ${name}`);
  return ds.options.type === 'mysql' || ds.options.type === 'mariadb' ? `\`${name}\`` : `"${name}"`;
}

function placeholders(ds: DataSource, count: number): string {
  return Array.from({ length: count }, (_, i) =>
    ds.options.type === 'postgres' ? `$${i + 1}` : '?',
  ).join(', ');
}

/** A business table: one row per effect a handler had. */
export async function createBusinessTable(ds: DataSource, table: string): Promise<void> {
  await ds.query(
    `CREATE TABLE ${q(ds, table)} (consumer VARCHAR(128) NOT NULL, message_id VARCHAR(255) NOT NULL, note VARCHAR(255) NULL)`,
  );
}

/** The handler's business write, in the transaction it is given. */
export async function writeEffect(
  manager: EntityManager,
  table: string,
  consumer: string,
  messageId: string,
  note: string | null = null,
): Promise<void> {
  const ds = manager.connection;
  await manager.query(
    `INSERT INTO ${q(ds, table)} (consumer, message_id, note) VALUES (${placeholders(ds, 3)})`,
    [consumer, messageId, note],
  );
}

export interface Effect {
  readonly consumer: string;
  readonly messageId: string;
  readonly note: string | null;
}

export async function readEffects(ds: DataSource, table: string): Promise<Effect[]> {
  const rows = await ds.query<{ consumer: string; message_id: string; note: string | null }[]>(
    `SELECT consumer, message_id, note FROM ${q(ds, table)} ORDER BY consumer, message_id`,
  );
  return rows.map((r) => ({ consumer: r.consumer, messageId: r.message_id, note: r.note }));
}

export interface InboxRow {
  readonly consumer: string;
  readonly messageId: string;
}

/** The inbox table's keys, sorted; MySQL's VARBINARY columns are read back as text. */
export async function readInbox(ds: DataSource, table: string): Promise<InboxRow[]> {
  const mysql = ds.options.type === 'mysql' || ds.options.type === 'mariadb';
  const cols = mysql
    ? 'CAST(consumer AS CHAR) AS consumer, CAST(message_id AS CHAR) AS message_id'
    : 'consumer, message_id';
  const rows = await ds.query<{ consumer: string; message_id: string }[]>(
    `SELECT ${cols} FROM ${q(ds, table)}`,
  );
  return rows
    .map((r) => ({ consumer: String(r.consumer), messageId: String(r.message_id) }))
    .sort((a, b) =>
      a.consumer === b.consumer
        ? a.messageId.localeCompare(b.messageId)
        : a.consumer.localeCompare(b.consumer),
    );
}

export async function dropTables(ds: DataSource, tables: readonly string[]): Promise<void> {
  for (const table of tables) await ds.query(`DROP TABLE IF EXISTS ${q(ds, table)}`);
}

/**
 * Database sessions running a statement on `table` that waits on a lock (PostgreSQL) or is still
 * executing an INSERT (MySQL/MariaDB, where information_schema.innodb_trx does not reliably list
 * a transaction blocked in its first statement).
 */
async function sessionsStuckOn(ds: DataSource, table: string): Promise<string[]> {
  if (ds.options.type === 'postgres') {
    const rows = await ds.query<{ id: string }[]>(
      `SELECT pid::text AS id FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`,
      [table],
    );
    return rows.map((r) => r.id);
  }
  const rows = await ds.query<{ id: string | number }[]>(
    `SELECT id FROM information_schema.processlist WHERE command = 'Query' AND info LIKE 'INSERT%' AND LOCATE(?, info) > 0`,
    [table],
  );
  return rows.map((r) => String(r.id));
}

/**
 * Resolves once one session has been stuck in a statement on `table` for two polls in a row: the
 * proof that a concurrent duplicate waits for the first transaction (an uncontended one-row
 * INSERT takes well under a millisecond). PostgreSQL and MySQL/MariaDB only.
 */
export async function waitUntilBlocked(ds: DataSource, table: string): Promise<void> {
  let previous = new Set<string>();
  await waitFor(
    "a concurrent INSERT into the inbox to wait on the first transaction's lock",
    async () => {
      const now = await sessionsStuckOn(ds, table);
      const stuck = now.some((id) => previous.has(id));
      previous = new Set(now);
      return stuck;
    },
    { timeoutMs: 20_000, intervalMs: 150 },
  );
}

/**
 * A publisher that sends the chosen messages twice, as the outbox does when a publish reached the
 * broker but its acknowledgement did not come back (a timeout, a lost connection): the message
 * is retried and arrives again with the same id. Reports the first attempt's outcomes.
 */
export class DuplicatingPublisher implements OutboxPublisher {
  constructor(
    private readonly inner: OutboxPublisher,
    private readonly twice: (record: OutboxRecord) => boolean = () => true,
  ) {}

  async publish(
    records: readonly OutboxRecord[],
    signal: AbortSignal,
  ): Promise<readonly PublishOutcome[]> {
    const outcomes = await this.inner.publish(records, signal);
    const again = records.filter((r, i) => outcomes[i]?.ok === true && this.twice(r));
    if (again.length > 0) await this.inner.publish(again, signal);
    return outcomes;
  }

  async close(): Promise<void> {
    await this.inner.close?.();
  }
}
