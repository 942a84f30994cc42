import type { SqlRunner } from '../ports/sql-port';
import { mysqlOwnerLockName } from '../shared-sql/owner-leases';

/**
 * Runs `work` while `tx`'s session holds the owner locks (`GET_LOCK(…, 0)`) of those of `keys`
 * that no other session holds: no owner can take one of those keys meanwhile. `work` gets the
 * keys held. One statement takes every lock and one gives them back, before `tx`'s connection
 * goes back to its pool, whatever the number of owners: a takeover's rounds stay few on a
 * loaded server.
 */
export async function withFreeOwnerLocks<T>(
  tx: SqlRunner,
  keys: readonly number[],
  work: (held: readonly number[]) => Promise<T>,
): Promise<T> {
  const names = keys.map(mysqlOwnerLockName);
  // Until the locks' answer is read, any of them may be held (a statement failed midway).
  let held = keys;
  try {
    const { rows } = await tx.query<Record<string, unknown>>(
      `SELECT ${names.map((_, i) => `GET_LOCK(?, 0) AS l${i}`).join(', ')}`,
      names,
    );
    const got = rows[0] ?? {};
    held = keys.filter((_, i) => Number(got[`l${i}`]) === 1);
    return await work(held);
  } finally {
    if (held.length > 0) {
      await tx.query(
        `SELECT ${held.map((_, i) => `RELEASE_LOCK(?) AS r${i}`).join(', ')}`,
        held.map(mysqlOwnerLockName),
      );
    }
  }
}
