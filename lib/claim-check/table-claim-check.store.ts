import type { DataSource } from 'typeorm';
import { OutboxClaimCheckError } from '../errors/outbox-claim-check.error';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { TABLE_LOCATION_PREFIX } from '../publishers/claim-check/claim-check-reference';
import type {
  ClaimCheckBlob,
  ClaimCheckReference,
  ClaimCheckStore,
} from '../publishers/claim-check/claim-check-store.interface';
import { claimCheckLedger, type ClaimCheckLedger } from '../store/claim-check-ledger';
import type { OutboxConnection } from '../store/ports/outbox-connection';
import type { SqlPort } from '../store/ports/sql-port';
import { typeormSqlPort } from '../typeorm/typeorm.sql-port';

/** Where a consumer reads the payloads the producer's outbox table keeps. */
export interface TableClaimCheckReader {
  /** The TypeORM DataSource of the producer's database; or `connection`. */
  readonly dataSource?: DataSource;
  /** The outbox connection of the producer's database (`pgOutbox(pool)`, …); or `dataSource`. */
  readonly connection?: OutboxConnection<unknown>;
  /** The producer's outbox table: its claim-check table is `<tableName>_claim_checks`. @default 'outbox' */
  readonly tableName?: string;
  /** The producer's schema (PostgreSQL) or database (MySQL). @default the connection's */
  readonly schema?: string;
}

/**
 * The claim check's store in the outbox's own database, for apps without object storage
 * (docs/claim-check.md): the payload is written, at publish time and in a short transaction of
 * its own, to `<table>_claim_checks` beside the outbox table, and deleted by the cleaner with
 * the last message that sent it. The producer passes it as it is (`tableClaimCheckStore()`); a
 * consumer that reads payloads back gives it the producer's database (`{ dataSource }` or
 * `{ connection }`, and `tableName` when it is not `outbox`).
 */
export function tableClaimCheckStore(reader?: TableClaimCheckReader): ClaimCheckStore {
  let ledger: ClaimCheckLedger | undefined;
  const ledgerOf = (): ClaimCheckLedger => {
    if (ledger !== undefined) return ledger;
    if (reader === undefined) {
      throw new OutboxOptionsError(
        "tableClaimCheckStore() reads payloads back only when given the producer's database: pass { dataSource } or { connection }, and tableName when the outbox table is not 'outbox'.",
        'tableClaimCheckStore',
      );
    }
    let sql: SqlPort;
    if (reader.connection !== undefined) sql = reader.connection.sql;
    else if (reader.dataSource !== undefined) sql = typeormSqlPort(reader.dataSource);
    else {
      throw new OutboxOptionsError(
        'tableClaimCheckStore({ … }) needs dataSource or connection: the database whose outbox table keeps the payloads.',
        'tableClaimCheckStore',
      );
    }
    ledger = claimCheckLedger(sql, {
      tableName: reader.tableName ?? 'outbox',
      schema: reader.schema ?? null,
    });
    return ledger;
  };
  return {
    kind: 'table',
    // The publisher writes the bytes into the claim-check table itself.
    locationFor: () => null,
    async get(reference: ClaimCheckReference): Promise<ClaimCheckBlob | undefined> {
      if (!reference.location.startsWith(TABLE_LOCATION_PREFIX)) {
        throw new OutboxClaimCheckError(
          `The payload is at ${reference.location}, not in an outbox's claim-check table: read it with the store the producer writes to`,
          reference.location,
        );
      }
      const row = await ledgerOf().read(reference.blobId);
      if (row?.payload === null || row === undefined) return undefined;
      return { bytes: row.payload, contentType: row.contentType };
    },
  };
}
