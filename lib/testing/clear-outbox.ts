import type { DataSource } from 'typeorm';
import { typeormSqlPort } from '../typeorm/typeorm.sql-port';
import {
  outboxDialectOf,
  tableNamesFor,
  type OutboxTableOptions,
} from '../store/schema/outbox-table-ddl';
import { refuseUnknownTestingOptions } from './testing-option-keys';

const TABLE_OPTION_KEYS = {
  '': {
    tableName: true,
    schema: true,
    partitioning: true,
    with: true,
    online: true,
  } satisfies Record<keyof OutboxTableOptions, true>,
};

/**
 * Deletes every row of the outbox table (whatever its status) and of its attempt history, so
 * that each test starts from an empty outbox: a message left pending or backing off by an
 * earlier test, or an earlier run, would otherwise be published by this test's `drain()`. For
 * tests only; resolves to how many messages it deleted. The table name is validated like the
 * module's.
 */
export async function clearOutbox(
  dataSource: DataSource,
  options: OutboxTableOptions = {},
): Promise<number> {
  // `{ table: 'x' }` must not clear the default table instead.
  refuseUnknownTestingOptions('clearOutbox()', options, TABLE_OPTION_KEYS);
  const { table, attemptsTable } = tableNamesFor(outboxDialectOf(dataSource.options.type), options);
  const sql = typeormSqlPort(dataSource);
  return sql.transaction(async (tx) => {
    await tx.query(`DELETE FROM ${attemptsTable}`);
    return (await tx.query(`DELETE FROM ${table}`)).affected;
  });
}
