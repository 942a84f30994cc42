import { randomInt, randomUUID } from 'node:crypto';

/**
 * Owner leases: what fast takeover after a crash reads in a lease token (ARCHITECTURE.md,
 * "Takeover after a crash"). A dispatcher holding an owner lock writes tokens that name the
 * lock: the lock's key as the first 8 hex digits, and UUID version 8 (a custom layout) where a
 * plain token has 4. Only version-8 tokens are ever taken over; a token of a dispatcher with no
 * owner lock (an older release, a port without sessions) is a random version-4 UUID, whose
 * leases wait out `leaseMs` as before.
 */

/** The character of a token (at its UUID version's place) that marks an owner lease. */
export const OWNER_TOKEN_VERSION = '8';

/** An owner key's 8 lower-case hex digits: all a statement ever receives of it. */
const OWNER_HEX = /^[0-9a-f]{8}$/;

/**
 * PostgreSQL: the first key of the two-key advisory locks that owner locks take (the second is
 * the owner's key). Positive, so that `pg_locks.classid` shows it as written; the two-key
 * space never meets the one-key locks of enqueue (PostgreSQL keeps them apart).
 */
export const POSTGRES_OWNER_LOCK_CLASS = 0x4f42_4f57;

/** A fresh owner key: positive, so it reads the same as int4 and as oid. */
export function newOwnerKey(): number {
  return randomInt(1, 0x7fff_ffff);
}

/** The 8 hex digits a key's tokens start with. */
export function ownerHex(key: number): string {
  if (!Number.isInteger(key) || key < 1 || key > 0x7fff_ffff) {
    throw new RangeError(`owner key ${key} is not an integer in 1..2^31-1`);
  }
  return key.toString(16).padStart(8, '0');
}

/** The key named by 8 hex digits, or undefined for anything else (never trusted as SQL). */
export function ownerKeyOf(hex: string): number | undefined {
  if (!OWNER_HEX.test(hex)) return undefined;
  const key = Number.parseInt(hex, 16);
  return key >= 1 && key <= 0x7fff_ffff ? key : undefined;
}

/** A lease token of the owner holding `key`: its key, version 8, and 90 random bits. */
export function ownerToken(key: number): string {
  const random = randomUUID();
  // xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx: the key replaces the first group, 8 the version.
  return `${ownerHex(key)}${random.slice(8, 14)}${OWNER_TOKEN_VERSION}${random.slice(15)}`;
}

/** MySQL/MariaDB: what an owner lock's name starts with; its key's 8 hex digits follow. */
export const MYSQL_OWNER_LOCK_PREFIX = 'nestjs-outbox-owner-';

/** MySQL/MariaDB: the `GET_LOCK` name of an owner key (bound as a value, never written in). */
export function mysqlOwnerLockName(key: number): string {
  return `${MYSQL_OWNER_LOCK_PREFIX}${ownerHex(key)}`;
}

/**
 * MySQL/MariaDB: `mysqlOwnerLockName` of a key column, in SQL (`column` a qualified column name
 * of the library's own, never input): for a statement that tries every member's lock as it reads
 * the members' rows.
 */
export function mysqlOwnerLockNameOf(column: string): string {
  return `CONCAT('${MYSQL_OWNER_LOCK_PREFIX}', LPAD(LOWER(HEX(${column})), 8, '0'))`;
}
