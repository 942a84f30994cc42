// The server status flags of MySQL's OK packet (include/mysql_com.h), the same on MariaDB.
const SERVER_STATUS_IN_TRANS = 0x0001;
const SERVER_STATUS_AUTOCOMMIT = 0x0002;

/**
 * Whether the connection behind `query` is inside a transaction, as the server reports it: mysql2
 * keeps no transaction state, but every OK packet carries the server's status, so a `DO 0` round
 * trip reads it. Null when the answer has no status (a protocol without it): it cannot be told.
 */
export async function mysqlInTransaction(
  query: (sql: string) => Promise<readonly unknown[]>,
): Promise<boolean | null> {
  const [header] = await query('DO 0');
  const status = (header as { serverStatus?: unknown } | null)?.serverStatus;
  if (typeof status !== 'number') return null;
  // With autocommit off every statement runs in a transaction that only COMMIT ends.
  return (status & SERVER_STATUS_IN_TRANS) !== 0 || (status & SERVER_STATUS_AUTOCOMMIT) === 0;
}
