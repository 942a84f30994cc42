import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxMessages } from '../outbox.messages';

// Letters, digits and underscores, not starting with a digit: portable across PostgreSQL,
// MySQL and SQLite and never in need of escaping. Anything else is refused, not escaped.
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;
// PostgreSQL truncates longer names (MySQL allows 64).
const MAX_IDENTIFIER_LENGTH = 63;
/**
 * Longest table name: the longest name derived from it, `<table>_message_id_key`, must stay
 * within the 63 characters of an identifier.
 */
export const MAX_TABLE_NAME_LENGTH = MAX_IDENTIFIER_LENGTH - '_message_id_key'.length;

/**
 * Validates a table or schema name given in the options; throws at bootstrap when unsafe. The
 * table name has the shorter limit of {@link MAX_TABLE_NAME_LENGTH}.
 */
export function assertIdentifier(
  value: unknown,
  option: string,
  maxLength = option === 'tableName' ? MAX_TABLE_NAME_LENGTH : MAX_IDENTIFIER_LENGTH,
): asserts value is string {
  if (typeof value !== 'string' || !IDENTIFIER.test(value) || value.length > maxLength) {
    throw new OutboxOptionsError(
      OutboxMessages.optionInvalid(
        option,
        `${JSON.stringify(value)} is not a safe SQL identifier`,
        `Use 1 to ${maxLength} letters, digits or underscores, starting with a letter or underscore.`,
      ),
      option,
    );
  }
}

/**
 * Every table the outbox may make for one outbox table, by its role, and the suffix its name
 * adds to the table's: the one list from which the quoted names below are made and which
 * `dropOutboxTables` removes, so that a table added here is dropped too.
 */
export const OUTBOX_TABLE_SUFFIXES = {
  /** The outbox table itself. */
  table: '',
  /** The per-key lock table (MySQL/MariaDB only). */
  lockTable: '_key_lock',
  /** The attempt history: one row per failed attempt. */
  attemptsTable: '_attempts',
  /** The archive, where the cleaner moves rows when asked to. */
  archiveTable: '_archive',
  /**
   * On a partitioned table, the unpartitioned guard that keeps supplied message ids unique (see
   * docs/partitioning.md).
   */
  idsTable: '_ids',
  /**
   * The last sequence number given to each key (`ordering.sequence`), apart from the outbox
   * table so that the cleaner deleting delivered rows never resets it.
   */
  keySeqTable: '_key_seq',
  /**
   * Partitioned delivery (schema step 9): the live dispatchers, each with its heartbeat on the
   * database clock.
   */
  dispatchersTable: '_dispatchers',
  /** Partitioned delivery: each of the 256 partitions' owner and fencing generation. */
  ownersTable: '_owners',
  /** Log tailing on MySQL/MariaDB: where the binlog reader is (docs/log-tailing.md). */
  logPositionTable: '_log_position',
  /** The claim check (schema step 10): the payloads sent by reference (docs/claim-check.md). */
  claimChecksTable: '_claim_checks',
  /** The erasure (schema step 11): one data key per subject (docs/erasure.md). */
  subjectKeysTable: '_subject_keys',
  /** The erasure: each (data key, topic, key) a sealed message was written for. */
  subjectUsesTable: '_subject_uses',
} as const;

/** The role of a table named after the outbox table (`OUTBOX_TABLE_SUFFIXES`). */
export type OutboxTableRole = keyof typeof OUTBOX_TABLE_SUFFIXES;

/**
 * A validated, quoted table reference and the names derived from it: each table of
 * `OUTBOX_TABLE_SUFFIXES` (`table` itself, `lockTable`, `attemptsTable`, …), quoted and
 * qualified like the table, ready to splice into SQL.
 */
export interface OutboxTableNames extends Readonly<Record<OutboxTableRole, string>> {
  /** Unquoted names, for index names and notifications. */
  readonly tableName: string;
  readonly schema: string | null;
  /** Quotes an index or constraint name derived from the table name. */
  readonly quote: (name: string) => string;
  /** Quotes a table name derived from the table name (a partition) and qualifies it like the table. */
  readonly qualify: (name: string) => string;
}

export type IdentifierQuoting = 'double' | 'backtick';

/** Builds the quoted names once; the inputs must have passed `assertIdentifier`. */
export function outboxTableNames(
  tableName: string,
  schema: string | null,
  quoting: IdentifierQuoting,
): OutboxTableNames {
  const quote = (name: string): string => {
    // Derived names (indexes, constraints, the lock table) may use the full identifier length.
    assertIdentifier(name, 'tableName', MAX_IDENTIFIER_LENGTH);
    return quoting === 'double' ? `"${name}"` : `\`${name}\``;
  };
  const qualify = (name: string): string =>
    schema === null ? quote(name) : `${quote(schema)}.${quote(name)}`;
  const tables = Object.fromEntries(
    Object.entries(OUTBOX_TABLE_SUFFIXES).map(([role, suffix]) => [
      role,
      qualify(`${tableName}${suffix}`),
    ]),
  ) as Record<OutboxTableRole, string>;
  return {
    ...tables,
    tableName,
    schema,
    quote,
    qualify,
  };
}

/** Validated, quoted names of one inbox table. */
export interface InboxTableNames {
  /** Quoted, schema-qualified table, ready to splice into SQL. */
  readonly table: string;
  /** Quoted name of the received_at index. */
  readonly index: string;
  /** Quoted `<inbox>_seq`: the gap guard's last sequence number per consumer and key. */
  readonly sequenceTable: string;
  readonly schema: string | null;
  readonly quote: (name: string) => string;
}
