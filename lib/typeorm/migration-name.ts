import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxMessages } from '../outbox.messages';

// TypeORM reads a migration's timestamp back from the last 13 characters of its name.
const TIMESTAMP_DIGITS = 13;
const MAX_TIMESTAMP = 10 ** TIMESTAMP_DIGITS - 1;

/**
 * The TypeORM name of the migration that creates one table: `<prefix>_<schema.>table_<timestamp>`.
 * Derived from the table, so two tables in one DataSource have two migrations (TypeORM refuses
 * duplicate names), and stable, so TypeORM recognises the migration it already ran.
 */
export function tableMigrationName(
  prefix: string,
  table: { readonly tableName: string; readonly schema?: string },
  timestamp: number,
  subject: string,
): string {
  if (!Number.isSafeInteger(timestamp) || timestamp < 1 || timestamp > MAX_TIMESTAMP) {
    throw new OutboxOptionsError(
      OutboxMessages.optionInvalid(
        'timestamp',
        `${timestamp} is not a JavaScript timestamp TypeORM can read back from the migration name`,
        'Pass milliseconds since 1970 (13 digits, as Date.now() gives), or leave it out.',
        subject,
      ),
      'timestamp',
    );
  }
  const where = table.schema === undefined ? table.tableName : `${table.schema}.${table.tableName}`;
  return `${prefix}_${where}_${String(timestamp).padStart(TIMESTAMP_DIGITS, '0')}`;
}
