import { outboxTableNames } from '../../internal/sql-identifier';
import type { SqlPort } from '../../store/ports/sql-port';
import {
  formatBytes,
  LogCommandUsageError,
  type LogCommandArgs,
  type LogCommandResult,
  type LogCommands,
} from '../log-commands';
import { ensureLogicalSlot } from './postgres-slot';
import {
  POSTGRES_DROP_SLOT,
  POSTGRES_PUBLICATION_STATUS,
  POSTGRES_SLOT_STATUS,
  postgresDropPublication,
  postgresLogNames,
  postgresLogTailingDdl,
  type PostgresLogNames,
} from './postgres-log-tailing.sql';

// `outbox log setup|status|drop` on PostgreSQL (docs/log-tailing.md): the publication and the
// replication slot.

/** The slot and publication the command means: the options', else the table's defaults. */
async function logNames(args: LogCommandArgs, sql: SqlPort): Promise<PostgresLogNames> {
  // The slot's default name holds the database (slots are per server, publications per database).
  const [row] = (await sql.query<{ db: string }>('SELECT current_database() AS db')).rows;
  const defaults = postgresLogNames(args.schema ?? 'public', args.table, row?.db ?? '');
  return {
    slot: args.slot ?? defaults.slot,
    publication: args.publication ?? defaults.publication,
  };
}

/** How long `outbox log setup` waits for the server's open write transactions to make the slot. */
const SETUP_SLOT_WAIT_MS = 60_000;

/**
 * Creates the publication of the outbox table's inserts (or adds the table to it), checks that
 * it now covers the table, and makes the replication slot (idempotent), so that the app's first
 * start neither waits for the server's open transactions nor fails its readiness probe.
 */
async function logSetup(args: LogCommandArgs, sql: SqlPort): Promise<LogCommandResult> {
  const { publication, slot } = await logNames(args, sql);
  const names = outboxTableNames(args.table, args.schema, 'double');
  for (const statement of postgresLogTailingDdl(names, publication)) await sql.query(statement);
  // Checked after the DDL, as the app checks it: a publication of this name made by hand may
  // publish no inserts, and only this query says what the server will send.
  const [pub] = (
    await sql.query<{ covers: boolean; pubinsert: boolean }>(POSTGRES_PUBLICATION_STATUS, [
      publication,
      args.schema ?? 'public',
      args.table,
    ])
  ).rows;
  if (pub?.covers !== true || !pub.pubinsert) {
    return {
      text: `Publication ${publication} ${pub === undefined ? 'could not be made' : pub.covers ? 'covers ' + names.table + ' but does not publish inserts' : 'still does not cover ' + names.table} after "outbox log setup". Check it (SELECT * FROM pg_publication_tables WHERE pubname = '${publication}'), or drop it (outbox log drop --yes) and run "outbox log setup" again.`,
      json: { publication, table: names.table, covered: false },
      exitCode: 1,
    };
  }
  const made = await ensureLogicalSlot(sql, slot, SETUP_SLOT_WAIT_MS, () => undefined);
  const slotLine =
    made === 'exists'
      ? `Replication slot ${slot} was already there.`
      : `Made replication slot ${slot}: from now on the server keeps WAL for it until an app reads it (an unread slot fills the disk: "outbox log status", "outbox log drop").`;
  return {
    text: `Publication ${publication} publishes the inserts of ${names.table}. ${slotLine}`,
    json: { publication, table: names.table, covered: true, slot, slotMade: made !== 'exists' },
  };
}

/** The slot's state and the WAL it keeps, and whether the publication is there. */
async function logStatus(args: LogCommandArgs, sql: SqlPort): Promise<LogCommandResult> {
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
      ? `Slot ${slot}: none ("outbox log setup" makes it, or the app at its first start with log tailing).`
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
async function logDrop(args: LogCommandArgs, sql: SqlPort): Promise<LogCommandResult> {
  const { slot, publication } = await logNames(args, sql);
  if (!args.yes) {
    throw new LogCommandUsageError(
      `"outbox log drop" removes replication slot ${slot} and publication ${publication}: an app still set to log tailing makes the slot again (at once if it is running, else at its next start), and messages committed meanwhile are found by its sweep. Add --yes to go ahead.`,
    );
  }
  const [row] = (await sql.query<{ active: boolean }>(POSTGRES_SLOT_STATUS, [slot])).rows;
  if (row?.active === true) {
    return {
      text: `Slot ${slot} is being read by a running app: stop it (or set delivery back to 'poll' and deploy) first.`,
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

export const postgresLogCommands: LogCommands = {
  setup: logSetup,
  status: logStatus,
  drop: logDrop,
};
