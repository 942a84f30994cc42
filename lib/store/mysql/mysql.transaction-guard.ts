import type { SqlRunner } from '../ports/sql-port';
import {
  MYSQL_IN_TRANSACTION,
  mysqlTransactionGuard,
  type MysqlTransactionGuard,
} from './mysql.sql';

/**
 * What a guarded write checks of the caller's transaction on this server, read with `SELECT
 * VERSION()` on the caller's connection (the pool may have no other free: its transaction holds
 * one). Callers keep the answer: it does not change while the app runs.
 */
export async function readMysqlTransactionGuard(tx: SqlRunner): Promise<MysqlTransactionGuard> {
  return mysqlTransactionGuard(await readMysqlVersion(tx));
}

/** The server's `VERSION()` (MariaDB's says so: `10.11.6-MariaDB…`), read on `runner`. */
export async function readMysqlVersion(runner: SqlRunner): Promise<string> {
  const { rows } = await runner.query<{ v: unknown }>('SELECT VERSION() AS v');
  const version = rows[0]?.v;
  // Text from most drivers; bytes from a port that reads strings as binary.
  const text = version instanceof Uint8Array ? Buffer.from(version).toString('utf8') : version;
  return typeof text === 'string' ? text : '';
}

/**
 * Whether the caller's transaction is open now, asked after a guarded write wrote less than it
 * was given: false means the write was refused (and changed nothing). MySQL 8, which cannot
 * tell: true.
 */
export async function mysqlStillInTransaction(
  tx: SqlRunner,
  guard: MysqlTransactionGuard,
): Promise<boolean> {
  if (guard === 'TRUE') return true;
  const { rows } = await tx.query<{ open: unknown }>(MYSQL_IN_TRANSACTION);
  return Number(rows[0]?.open ?? 1) !== 0;
}
