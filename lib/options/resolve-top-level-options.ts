import type { DataSource } from 'typeorm';
import type { OutboxObserver } from '../observers/outbox-observer.interface';
import type { OutboxPublisher } from '../publishers/outbox-publisher.interface';
import { assertIdentifier, MAX_TABLE_NAME_LENGTH } from '../internal/sql-identifier';
import type { AmbientTransaction } from './ambient-transaction.interface';
import type { OutboxConnection } from '../store/ports/outbox-connection';
import { OUTBOX_DEFAULTS } from './outbox-defaults';
import { checks, fail } from './outbox-option-checks';
import type { OutboxModuleOptions } from './outbox.options';

const defaults = OUTBOX_DEFAULTS[''];
const describe = checks.show;

function isDataSourceLike(value: unknown): value is DataSource {
  return (
    typeof value === 'object' &&
    value !== null &&
    'options' in value &&
    'createQueryRunner' in value &&
    typeof (value as { createQueryRunner: unknown }).createQueryRunner === 'function'
  );
}

function isConnectionLike(value: unknown): value is OutboxConnection<unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const { sql, join } = value as { sql?: unknown; join?: unknown };
  return (
    typeof join === 'function' &&
    typeof sql === 'object' &&
    sql !== null &&
    typeof (sql as { query?: unknown }).query === 'function' &&
    typeof (sql as { transaction?: unknown }).transaction === 'function'
  );
}

/** The database: exactly one of `dataSource` (TypeORM) and `connection` (any other library). */
export function resolveDatabase(options: OutboxModuleOptions): {
  dataSource: DataSource | string | undefined;
  connection: OutboxConnection<unknown> | undefined;
} {
  const { dataSource, connection } = options;
  if (dataSource !== undefined && connection !== undefined) {
    fail(
      'connection',
      'it is given together with dataSource, so the outbox would not know which to use',
      'Give dataSource for TypeORM or connection (e.g. pgOutbox(pool)) for another library, not both.',
    );
  }
  if (connection === undefined) return { dataSource: resolveDataSource(dataSource), connection };
  if (!isConnectionLike(connection)) {
    fail(
      'connection',
      'it is not an OutboxConnection ({ sql, join(tx) })',
      "Pass the connection of your library: pgOutbox(pool) from 'nestjs-outbox/pg', " +
        'mysql2Outbox(pool), betterSqlite3Outbox(db) or kyselyOutbox(db) from ' +
        "'nestjs-outbox/mysql2', '/better-sqlite3' or '/kysely'.",
    );
  }
  return { dataSource: undefined, connection };
}

function resolveDataSource(dataSource: DataSource | string | undefined): DataSource | string {
  if (dataSource === undefined) {
    fail(
      'dataSource',
      'neither dataSource nor connection is given, so the outbox has no database',
      'Pass dataSource (a TypeORM DataSource or its registered name), or connection for ' +
        "another library (e.g. pgOutbox(pool) from 'nestjs-outbox/pg', or mysql2Outbox, " +
        'betterSqlite3Outbox, kyselyOutbox: docs/without-typeorm.md#without-typeorm).',
    );
  }
  if (typeof dataSource === 'string') {
    if (dataSource.trim() === '') {
      fail(
        'dataSource',
        'the name is empty',
        'Pass the DataSource instance or the name it was registered under.',
      );
    }
  } else if (!isDataSourceLike(dataSource)) {
    fail(
      'dataSource',
      'it is missing or not a TypeORM DataSource',
      'Pass the DataSource (inject it in forRootAsync) or its registered name.',
    );
  }
  return dataSource;
}

export function resolvePublisher(
  publisher: OutboxPublisher | undefined,
  workers: boolean,
): OutboxPublisher | undefined {
  if (
    publisher !== undefined &&
    (typeof publisher !== 'object' || publisher === null || typeof publisher.publish !== 'function')
  ) {
    fail(
      'publisher',
      'it has no publish(messages) method',
      'Pass an OutboxPublisher such as new ClientProxyPublisher(client).',
    );
  }
  if (workers && publisher === undefined) {
    fail(
      'publisher',
      'it is required when the workers are enabled',
      'Pass a publisher, or register the module with { workers: false } for an enqueue-only app.',
    );
  }
  return publisher;
}

export function resolveTable(options: OutboxModuleOptions): {
  tableName: string;
  schema: string | null;
} {
  const tableName = options.tableName ?? defaults.tableName.value;
  if (typeof tableName === 'string' && tableName.length > MAX_TABLE_NAME_LENGTH) {
    fail(
      'tableName',
      `"${tableName}" is longer than ${MAX_TABLE_NAME_LENGTH} characters`,
      'Use a shorter name: index and lock-table names are derived from it.',
    );
  }
  assertIdentifier(tableName, 'tableName');
  // null: the connection's own schema (defaults.schema).
  const schema = options.schema ?? null;
  if (schema !== null) assertIdentifier(schema, 'schema');
  return { tableName, schema };
}

export function resolveAmbientTransaction(
  ambient: AmbientTransaction<unknown> | undefined,
): AmbientTransaction<unknown> | undefined {
  if (
    ambient !== undefined &&
    (typeof ambient !== 'object' ||
      ambient === null ||
      typeof ambient.currentManager !== 'function')
  ) {
    fail(
      'ambientTransaction',
      'it has no currentManager() method',
      'Use fromClsTransactionHost(txHost) or implement AmbientTransaction.',
    );
  }
  return ambient;
}

export function resolveInstanceId(value: string | undefined): string {
  const instanceId = value ?? defaults.instanceId.make();
  if (typeof instanceId !== 'string' || instanceId.trim() === '' || instanceId.length > 128) {
    fail(
      'instanceId',
      `${describe(instanceId)} is not a string of 1 to 128 characters`,
      'Leave it out to use host name and pid.',
    );
  }
  return instanceId;
}

export function resolveObserver(value: OutboxObserver | undefined): OutboxObserver {
  const observer = value ?? defaults.observer.make();
  if (typeof observer !== 'object' || observer === null) {
    fail(
      'observer',
      `${describe(observer)} is not an object`,
      'Pass an object with optional hooks such as onBatch(report).',
    );
  }
  return observer;
}

export function resolveHeadersProvider(
  value: OutboxModuleOptions['headersProvider'],
): OutboxModuleOptions['headersProvider'] {
  if (value !== undefined && typeof value !== 'function') {
    fail(
      'headersProvider',
      'it is not a function',
      'Pass () => ({ header: value }), e.g. traceContextHeaders from nestjs-outbox/opentelemetry.',
    );
  }
  return value;
}
