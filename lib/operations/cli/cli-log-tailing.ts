import { outboxTableNames } from '../../internal/sql-identifier';
import {
  POSTGRES_DROP_SLOT,
  POSTGRES_PUBLICATION_STATUS,
  POSTGRES_SLOT_STATUS,
  postgresDropPublication,
  postgresLogNames,
  postgresLogTailingDdl,
  type PostgresLogNames,
} from '../../store/postgres/postgres.log-tailing-sql';
import type { SqlPort } from '../../store/ports/sql-port';
import type { CliArgs } from './cli-args';
import { CliUsageError } from './cli-usage.error';
import type { CliDatabase } from './database-url';

// The `outbox log …` commands and `schema migrate --log-tailing` (docs/log-tailing.md): the
// publication and replication slot of PostgreSQL log tailing. Apart from outbox-cli.ts, which
// only routes to them.

/** What one of these commands prints. */
export interface LogCliResult {
  readonly text: string;
  readonly json: unknown;
  readonly exitCode?: number;
}

/** The slot and publication the command means: the options', else the table's defaults. */
async function logNames(args: CliArgs, sql: SqlPort): Promise<PostgresLogNames> {
  // The slot's default name holds the database (slots are per server, publications per database).
  const [row] = (await sql.query<{ db: string }>('SELECT current_database() AS db')).rows;
  const defaults = postgresLogNames(args.schema ?? 'public', args.table, row?.db ?? '');
  return {
    slot: args.slot ?? defaults.slot,
    publication: args.publication ?? defaults.publication,
  };
}

function postgresOnly(db: CliDatabase, command: string): void {
  if (db.dialect !== 'postgres') {
    throw new CliUsageError(
      `"outbox ${command}" is for PostgreSQL (DATABASE_URL names ${db.dialect}); MySQL/MariaDB's binlog needs no publication or slot.`,
    );
  }
}

/** Creates the publication of the outbox table's inserts (idempotent). */
export async function logSetup(
  args: CliArgs,
  db: CliDatabase,
  sql: SqlPort,
): Promise<LogCliResult> {
  postgresOnly(db, 'log setup');
  const { publication } = await logNames(args, sql);
  const names = outboxTableNames(args.table, args.schema, 'double');
  for (const statement of postgresLogTailingDdl(names, publication)) await sql.query(statement);
  return {
    text: `Publication ${publication} publishes the inserts of ${names.table}. The app's logTailing() makes its replication slot at its first start (a role with REPLICATION).`,
    json: { publication, table: names.table },
  };
}

/** The slot's state and the WAL it keeps, and whether the publication is there. */
export async function logStatus(
  args: CliArgs,
  db: CliDatabase,
  sql: SqlPort,
): Promise<LogCliResult> {
  postgresOnly(db, 'log status');
  const { slot, publication } = await logNames(args, sql);
  const [row] = (
    await sql.query<{
      active: boolean;
      confirmed_flush_lsn: string | null;
      retained_bytes: number | null;
    }>(POSTGRES_SLOT_STATUS, [slot])
  ).rows;
  const [pub] = (
    await sql.query<{ covers: boolean }>(POSTGRES_PUBLICATION_STATUS, [
      publication,
      args.schema ?? 'public',
      args.table,
    ])
  ).rows;
  const json = {
    slot,
    slotExists: row !== undefined,
    active: row?.active ?? false,
    confirmedFlushLsn: row?.confirmed_flush_lsn ?? null,
    retainedBytes: row?.retained_bytes === undefined ? null : Number(row.retained_bytes),
    publication,
    publicationCoversTable: pub?.covers === true,
  };
  const lines = [
    row === undefined
      ? `Slot ${slot}: none (the app makes it at its first start with log tailing).`
      : `Slot ${slot}: ${row.active ? 'read now' : 'NOT read by any process'}, confirmed up to ${row.confirmed_flush_lsn ?? '-'}, keeping ${formatBytes(json.retainedBytes)} of WAL.`,
    `Publication ${publication}: ${pub === undefined ? 'missing (outbox log setup)' : pub.covers ? 'publishes the table' : 'does not cover the table'}.`,
  ];
  if (row !== undefined && !row.active) {
    lines.push(
      'A slot nobody reads keeps WAL until the disk fills: start the app, or drop it with "outbox log drop --yes".',
    );
  }
  return { text: lines.join('\n'), json };
}

/** Drops the slot (and the publication), so the server stops keeping WAL for it. */
export async function logDrop(args: CliArgs, db: CliDatabase, sql: SqlPort): Promise<LogCliResult> {
  postgresOnly(db, 'log drop');
  const { slot, publication } = await logNames(args, sql);
  if (!args.yes) {
    throw new CliUsageError(
      `"outbox log drop" removes replication slot ${slot} and publication ${publication}: an app still set to log tailing makes the slot again at its next start, and messages committed meanwhile are found by its poll. Add --yes to go ahead.`,
    );
  }
  const [row] = (await sql.query<{ active: boolean }>(POSTGRES_SLOT_STATUS, [slot])).rows;
  if (row?.active === true) {
    return {
      text: `Slot ${slot} is being read by a running app: stop it (or set dispatcher.observe back to 'poll' and deploy) first.`,
      json: { slot, dropped: false, reason: 'active' },
      exitCode: 1,
    };
  }
  if (row !== undefined) await sql.query(POSTGRES_DROP_SLOT, [slot]);
  await sql.query(postgresDropPublication(publication));
  return {
    text: `${row === undefined ? `No slot ${slot} to drop` : `Dropped slot ${slot}`}; dropped publication ${publication} (if it existed).`,
    json: { slot, dropped: row !== undefined, publication },
  };
}

function formatBytes(bytes: number | null): string {
  if (bytes === null) return 'an unknown amount';
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 'B';
  for (const u of units) {
    if (value < 1024) break;
    value /= 1024;
    unit = u;
  }
  return `${value.toFixed(1)} ${unit}`;
}
