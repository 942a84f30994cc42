import type { DataSource } from 'typeorm';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import type { OutboxKeyWrapper } from '../message/erasure/key-wrapper';
import { resolveErasureOptions } from '../options/resolve-erasure-options';
import type { OutboxConnection } from '../store/ports/outbox-connection';
import type { SqlPort } from '../store/ports/sql-port';
import { subjectKeyVault, type DataKeyLookup } from '../store/subject-key-vault';
import { typeormSqlPort } from '../typeorm/typeorm.sql-port';

/** What a reader of sealed personal data needs: the data key of an id (the key service). */
export interface OutboxSubjectKeys {
  /** The data key `keyId` names: live (unwrapped), erased, or unknown. */
  dataKey(keyId: string): Promise<DataKeyLookup>;
}

/** Where the key table is and how its keys are wrapped, for `subjectKeys()`. */
export interface OutboxSubjectKeysOptions {
  /** The TypeORM DataSource of the producer's database; or `connection`. */
  readonly dataSource?: DataSource;
  /** The outbox connection of the producer's database (`pgOutbox(pool)`, …); or `dataSource`. */
  readonly connection?: OutboxConnection<unknown>;
  /** The producer's outbox table: its key table is `<tableName>_subject_keys`. @default 'outbox' */
  readonly tableName?: string;
  /** The producer's schema (PostgreSQL) or database (MySQL). @default the connection's */
  readonly schema?: string;
  /** The producer's `erasure.masterKey`; or `keyWrapper`. */
  readonly masterKey?: Buffer | string;
  /** The producer's `erasure.keyWrapper` (its KMS); or `masterKey`. */
  readonly keyWrapper?: OutboxKeyWrapper;
}

/**
 * The key service over the producer's key table (docs/erasure.md): a consumer with read access
 * to it and the wrapping key (or KMS) opens sealed personal data with `PersonalDataReader`. Each
 * lookup reads the table, so a key erased a moment ago is never answered from memory.
 */
export function subjectKeys(options: OutboxSubjectKeysOptions): OutboxSubjectKeys {
  const erasure = resolveErasureOptions({
    ...(options.masterKey === undefined ? {} : { masterKey: options.masterKey }),
    ...(options.keyWrapper === undefined ? {} : { keyWrapper: options.keyWrapper }),
  });
  if (erasure === null) throw new Error('unreachable: erasure options given');
  let sql: SqlPort;
  if (options.connection !== undefined) sql = options.connection.sql;
  else if (options.dataSource !== undefined) sql = typeormSqlPort(options.dataSource);
  else {
    throw new OutboxOptionsError(
      'subjectKeys({ … }) needs dataSource or connection: the database whose outbox table keeps the subject keys.',
      'subjectKeys',
    );
  }
  const vault = subjectKeyVault(
    sql.databaseType,
    { tableName: options.tableName ?? 'outbox', schema: options.schema ?? null },
    erasure.keyWrapper,
  );
  return { dataKey: (keyId) => vault.dataKey(sql, keyId) };
}
