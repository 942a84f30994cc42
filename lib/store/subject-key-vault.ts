import { createHash, randomBytes, randomUUID } from 'node:crypto';
import type { OutboxTableNames } from '../internal/sql-identifier';
import type { OutboxKeyWrapper } from '../message/erasure/key-wrapper';
import { sealPayload } from '../message/erasure/sealed-payload';
import type { NewOutboxRow } from '../message/new-outbox-row';
import { OUTBOX_HEADER_SUBJECT_KEY } from '../outbox.constants';
import type { OutboxDatabase } from './outbox-database';
import type { SqlRunner } from './ports/sql-port';
import { outboxDatabase, outboxDialectOf, tableNamesFor } from './schema/outbox-table-ddl';
import type { SubjectKeyUse } from './shared-sql/subject-keys-sql';

/** A data key by its id, as a reader finds it. */
export type DataKeyLookup =
  | { readonly state: 'live'; readonly dataKey: Buffer }
  | { readonly state: 'erased'; readonly erasedAt: Date | null }
  | { readonly state: 'unknown' };

/** What erasing one subject found and did, inside the caller's transaction. */
export interface SubjectErased {
  /** The destroyed data key's id. */
  readonly keyId: string;
  /** Every (topic, key) a message sealed under it was written for; `key` null for none. */
  readonly uses: readonly { readonly topic: string; readonly key: string | null }[];
}

const DATA_KEY_BYTES = 32;
// An enqueue that makes a subject's key while erasures of it commit makes it again, this often.
const MAX_KEY_RACES = 3;

/** The SHA-256 of a subject, as the key table finds it: the subject itself is never stored. */
export function subjectHashOf(subject: string): string {
  return createHash('sha256').update(`nestjs-outbox:subject:${subject}`, 'utf8').digest('hex');
}

/**
 * The erasure's per-subject data keys over one outbox table's key table (docs/erasure.md):
 * seals personal data at enqueue in the caller's transaction, hands readers a data key by its
 * id, and destroys a subject's key.
 */
export class SubjectKeyVault {
  constructor(
    private readonly database: OutboxDatabase,
    readonly names: OutboxTableNames,
    /** Left out: the vault can erase (which unwraps nothing) but not seal or read. */
    private readonly keyWrapper?: OutboxKeyWrapper,
  ) {}

  private get wrapper(): OutboxKeyWrapper {
    if (this.keyWrapper === undefined) {
      throw new Error(
        'SubjectKeyVault: no key wrapper (erasure.masterKey or keyWrapper) to seal or read with',
      );
    }
    return this.keyWrapper;
  }

  /**
   * The rows with their personal data sealed, each with `x-outbox-subject-key`, and the keys
   * they were written for recorded; rows without personal data as they are. Runs in the
   * caller's transaction (`run`), so a rolled-back enqueue leaves no key and no use behind.
   */
  async seal(run: SqlRunner, rows: readonly NewOutboxRow[]): Promise<NewOutboxRow[]> {
    // One key per subject, taken in the order of their hashes: two enqueues with the same
    // subjects take their row locks in one order.
    const subjects = new Map<string, string>();
    for (const row of rows) {
      if (row.personal !== undefined)
        subjects.set(row.personal.subject, subjectHashOf(row.personal.subject));
    }
    const keys = new Map<string, { keyId: string; dataKey: Buffer }>();
    for (const [subject, hash] of [...subjects].sort((a, b) => (a[1] < b[1] ? -1 : 1))) {
      keys.set(subject, await this.keyOf(run, hash));
    }
    const uses = new Map<string, SubjectKeyUse>();
    const sealed = rows.map((row) => {
      const personal = row.personal;
      if (personal === undefined) return row;
      const key = keys.get(personal.subject) as { keyId: string; dataKey: Buffer };
      const use = { keyId: key.keyId, topic: row.topic, key: row.key ?? '' };
      uses.set(`${use.keyId}\u0000${use.topic}\u0000${use.key}`, use);
      const headers =
        row.headers === '{}'
          ? JSON.stringify({ [OUTBOX_HEADER_SUBJECT_KEY]: key.keyId })
          : JSON.stringify({
              ...(JSON.parse(row.headers) as Record<string, string>),
              [OUTBOX_HEADER_SUBJECT_KEY]: key.keyId,
            });
      const { personal: _sealed, ...rest } = row;
      return Object.assign(rest, {
        payload: sealPayload(row.payload, personal.fields, key.dataKey, key.keyId),
        headers,
      });
    });
    const ordered = [...uses.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1)).map(([, u]) => u);
    await this.database.subjectKeys.recordUses(run, this.names, ordered);
    return sealed;
  }

  /**
   * Records the uses of rows written with a data key's header already (re-drive copies), in the
   * transaction that writes them; nothing for rows without one.
   */
  async recordCopies(run: SqlRunner, rows: readonly NewOutboxRow[]): Promise<void> {
    const uses = new Map<string, SubjectKeyUse>();
    for (const row of rows) {
      if (!row.headers.includes(OUTBOX_HEADER_SUBJECT_KEY)) continue;
      const keyId = (JSON.parse(row.headers) as Record<string, string>)[OUTBOX_HEADER_SUBJECT_KEY];
      if (keyId === undefined) continue;
      const use = { keyId, topic: row.topic, key: row.key ?? '' };
      uses.set(`${use.keyId}\u0000${use.topic}\u0000${use.key}`, use);
    }
    if (uses.size === 0) return;
    const ordered = [...uses.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1)).map(([, u]) => u);
    await this.database.subjectKeys.recordUses(run, this.names, ordered);
  }

  /** A data key by its id: live (unwrapped), erased, or unknown. */
  async dataKey(run: SqlRunner, keyId: string): Promise<DataKeyLookup> {
    const stored = await this.database.subjectKeys.read(run, this.names, keyId);
    if (stored === undefined) return { state: 'unknown' };
    if (stored.state === 'erased') return stored;
    return { state: 'live', dataKey: await this.wrapper.unwrap(stored.wrapped, keyId) };
  }

  /**
   * Destroys the subject's data key in the transaction `tx`, after the enqueues still using it
   * (their share locks) have ended, and answers the keys it was used for; undefined when the
   * subject has no live key.
   */
  async erase(tx: SqlRunner, subject: string): Promise<SubjectErased | undefined> {
    const sql = this.database.subjectKeys;
    const keyId = await sql.lockForErase(tx, this.names, subjectHashOf(subject));
    if (keyId === undefined) return undefined;
    await sql.destroy(tx, this.names, keyId);
    const uses = await sql.takeUses(tx, this.names, keyId);
    return {
      keyId,
      uses: uses.map((u) => ({ topic: u.topic, key: u.key === '' ? null : u.key })),
    };
  }

  private async keyOf(
    run: SqlRunner,
    subjectHash: string,
  ): Promise<{ keyId: string; dataKey: Buffer }> {
    const sql = this.database.subjectKeys;
    const found = await sql.find(run, this.names, subjectHash);
    if (found !== undefined) {
      return { keyId: found.keyId, dataKey: await this.wrapper.unwrap(found.wrapped, found.keyId) };
    }
    const keyId = randomUUID();
    const dataKey = randomBytes(DATA_KEY_BYTES);
    const wrapped = await this.wrapper.wrap(dataKey, keyId);
    // Another transaction may have made the subject's key first (its insert won): use that
    // one. If an erasure destroyed it before it could be read, this one is made again.
    for (let attempt = 1; attempt <= MAX_KEY_RACES; attempt += 1) {
      const made = await sql.create(run, this.names, { keyId, subjectHash, wrapped });
      if (made === undefined) continue;
      return made.keyId === keyId
        ? { keyId, dataKey }
        : { keyId: made.keyId, dataKey: await this.wrapper.unwrap(made.wrapped, made.keyId) };
    }
    throw new Error(
      `SubjectKeyVault: the subject's data key was erased ${MAX_KEY_RACES} times while this enqueue made one; retry the transaction`,
    );
  }
}

/** The vault beside the outbox table `tableName` on a database of `databaseType`. */
export function subjectKeyVault(
  databaseType: string,
  table: { readonly tableName: string; readonly schema?: string | null },
  wrapper?: OutboxKeyWrapper,
): SubjectKeyVault {
  const dialect = outboxDialectOf(databaseType);
  return new SubjectKeyVault(
    outboxDatabase(dialect),
    tableNamesFor(dialect, { tableName: table.tableName, schema: table.schema ?? undefined }),
    wrapper,
  );
}
