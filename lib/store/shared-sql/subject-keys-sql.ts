import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SqlRunner } from '../ports/sql-port';

/**
 * The erasure's tables (schema step 11, docs/erasure.md):
 * - `<table>_subject_keys`: one data key per subject, as the key wrapper wrapped it, found by
 *   the SHA-256 of the subject. Erasing a subject clears both (`wrapped_key`, `subject_hash`
 *   NULL, `erased_at` set): the row stays so that a reader can tell an erased key from an
 *   unknown one, and a later message of the subject gets a new key.
 * - `<table>_subject_uses`: each (data key, topic, key) a message was sealed for, so that the
 *   erasure notice reaches every key that carried the subject's data, whatever the cleaner
 *   deleted since. A message without a key is recorded under the key `''` (never a real key).
 */

/** A subject's live data key, as stored. */
export interface StoredSubjectKey {
  readonly keyId: string;
  readonly wrapped: Buffer;
}

/** A data key read by its id: live (its wrapped bytes), erased, or unknown (undefined). */
export type StoredDataKey =
  | { readonly state: 'live'; readonly wrapped: Buffer }
  | { readonly state: 'erased'; readonly erasedAt: Date | null };

/** A (data key, topic, key) a sealed message was written for. */
export interface SubjectKeyUse {
  readonly keyId: string;
  readonly topic: string;
  /** `''` for a message without a key. */
  readonly key: string;
}

/** The erasure's statements on one database. */
export interface SubjectKeySql {
  /**
   * The live key of a subject, its row share-locked until the caller's transaction ends (where
   * the database locks rows), so an erasure waits for the enqueues that use it. It may miss a
   * key made by a transaction that committed after the caller's snapshot (MySQL/MariaDB):
   * `create` then answers that one.
   */
  find(
    run: SqlRunner,
    n: OutboxTableNames,
    subjectHash: string,
  ): Promise<StoredSubjectKey | undefined>;
  /**
   * Inserts a subject's key unless another transaction did first, and answers the subject's
   * live key then (this one, or the other's), locked as `find` locks it; undefined when the
   * other's was erased before it could be read (the caller makes its own again).
   */
  create(
    run: SqlRunner,
    n: OutboxTableNames,
    key: { keyId: string; subjectHash: string; wrapped: Buffer },
  ): Promise<StoredSubjectKey | undefined>;
  /** Records the uses (distinct, in a stable order), leaving those recorded already. */
  recordUses(run: SqlRunner, n: OutboxTableNames, uses: readonly SubjectKeyUse[]): Promise<void>;
  /** A data key by its id. */
  read(run: SqlRunner, n: OutboxTableNames, keyId: string): Promise<StoredDataKey | undefined>;
  /** The live key of a subject, locked for update until the transaction ends. */
  lockForErase(
    run: SqlRunner,
    n: OutboxTableNames,
    subjectHash: string,
  ): Promise<string | undefined>;
  /** Destroys the key: wrapped bytes and subject hash cleared, `erased_at` set. */
  destroy(run: SqlRunner, n: OutboxTableNames, keyId: string): Promise<void>;
  /** The (topic, key) pairs the key was used for, then forgets them. */
  takeUses(
    run: SqlRunner,
    n: OutboxTableNames,
    keyId: string,
  ): Promise<{ topic: string; key: string }[]>;
}

/** Bytes as a driver answers them (Buffer, Uint8Array), or null. */
export function bytesOf(value: unknown): Buffer | null {
  if (value === null || value === undefined) return null;
  if (Buffer.isBuffer(value)) return value;
  if (value instanceof Uint8Array) return Buffer.from(value);
  if (typeof value === 'string') return Buffer.from(value, 'utf8');
  return null;
}

/** Text as a driver answers it (a string, or bytes of a VARBINARY column). */
export function textOf(value: unknown): string {
  if (typeof value === 'string') return value;
  const bytes = bytesOf(value);
  return bytes === null ? String(value) : bytes.toString('utf8');
}

/** A timestamp as a driver answers it. */
export function dateOf(value: unknown): Date | null {
  if (value === null || value === undefined) return null;
  if (value instanceof Date) return value;
  if (typeof value !== 'string' && typeof value !== 'number') return null;
  const text = String(value);
  const date = new Date(/[zZ]|[+-]\d\d:?\d\d$/.test(text) ? text : `${text.replace(' ', 'T')}Z`);
  return Number.isNaN(date.getTime()) ? null : date;
}

/** A subject's key as a statement answers its `key_id` and `wrapped_key`; undefined when erased. */
export function storedKeyOf(
  row: { key_id: unknown; wrapped_key: unknown } | undefined,
): StoredSubjectKey | undefined {
  const wrapped = bytesOf(row?.wrapped_key);
  return row === undefined || wrapped === null ? undefined : { keyId: textOf(row.key_id), wrapped };
}

/** The positional reads every database shares, over the statements that differ. */
export function subjectKeyReads(select: {
  find: (n: OutboxTableNames) => string;
  read: (n: OutboxTableNames) => string;
  lock: (n: OutboxTableNames) => string;
}): Pick<SubjectKeySql, 'find' | 'read' | 'lockForErase'> {
  return {
    async find(run, n, subjectHash) {
      const { rows } = await run.query<{ key_id: unknown; wrapped_key: unknown }>(select.find(n), [
        subjectHash,
      ]);
      return storedKeyOf(rows[0]);
    },
    async read(run, n, keyId) {
      const { rows } = await run.query<{ wrapped_key: unknown; erased_at: unknown }>(
        select.read(n),
        [keyId],
      );
      const row = rows[0];
      if (row === undefined) return undefined;
      const wrapped = bytesOf(row.wrapped_key);
      return wrapped === null
        ? { state: 'erased', erasedAt: dateOf(row.erased_at) }
        : { state: 'live', wrapped };
    },
    async lockForErase(run, n, subjectHash) {
      const { rows } = await run.query<{ key_id: unknown }>(select.lock(n), [subjectHash]);
      return rows[0] === undefined ? undefined : textOf(rows[0].key_id);
    },
  };
}
