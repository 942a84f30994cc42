import { OutboxMessages } from '../../outbox.messages';

/** The `outbox` command's own texts: what it says when it cannot do what was asked. */
export const CliMessages = {
  driverMissing: (database: string, driver: string, npmPackage: string): string =>
    `DATABASE_URL names a ${database} database, which the outbox command reaches through ${driver} (the "${npmPackage}" package): it is not installed here. Install it in the project ("npm i ${npmPackage}"); TypeORM is not needed.`,

  driverUnusable: (missing: string): string =>
    `The installed database driver does not export ${missing}: is it a version the outbox supports (docs/without-typeorm.md)?`,

  cannotConnect: (where: string, reason: string): string => `Cannot connect to ${where}: ${reason}`,

  notDeliveryPartitions: (): string =>
    `("outbox partitions" is about the time partitions of a partitioned table; the 256 delivery partitions of dispatcher.claims: 'partitions', their owners and moves, are in "outbox delivery-partitions status".)`,

  sqliteFileMissing: (file: string): string =>
    `The SQLite database file ${file} does not exist (create it with "outbox schema migrate").`,

  messageNotFound: (messageId: string, table: string): string =>
    `No message ${messageId} in the outbox table ${table}: never enqueued in it, or deleted since (delivered rows go after cleaner.deliveredRetentionMs, dead ones when purged). Check --table and --schema.`,

  notDeadLetters: (done: string, ids: readonly string[]): string =>
    `Not dead letters, so not ${done}: ${ids.join(', ')}.`,

  expiredNotRetried: (ids: readonly string[]): string =>
    `Not retried, ${ids.length === 1 ? 'it' : 'they'} expired (the type's maxAgeMs): a retry would only dead-letter ${ids.length === 1 ? 'it' : 'them'} again unpublished. Purge ${ids.length === 1 ? 'it' : 'them'} (outbox dlq purge ID…), and enqueue the content again as a new message if it is still wanted: ${ids.join(', ')}.`,

  cdcNeedsBootstrapServers: (connector: string): string =>
    `--connector ${connector} needs --bootstrap-servers HOST:PORT: the ${connector} connector keeps the table's schema history in a Kafka topic, on the brokers of your Kafka Connect (e.g. --bootstrap-servers kafka:9092).`,

  cdcDatabaseName: (database: string, connector: string): string =>
    `DATABASE_URL names the database ${JSON.stringify(database)}, which the ${connector} connector's table list cannot take: it needs a database whose name is 1 to 63 letters, digits or underscores (the path of DATABASE_URL, e.g. mysql://user@host:3306/shop).`,

  partitionByUnsupported: (dialect: string): string =>
    `--partition-by: ${dialect} has no partitioned tables (PostgreSQL and MySQL/MariaDB do): leave --partition-by out; the cleaner keeps the plain table small.`,

  /** The audit table a re-drive is recorded in is missing: `create` is the command that makes it. */
  auditTableMissing: (table: string, cause: string, create: string): string =>
    `The audit table ${table} cannot be read (${cause}). Create it with "${create}", or ${OutboxMessages.auditTableDdl()}.`,

  redriveNoAuditTable: (table: string, cause: string, create: string): string =>
    `Re-drive refused: the audit table ${table} it must be recorded in cannot be read (${cause}). Create it with "${create}", or ${OutboxMessages.auditTableDdl()}; nothing was sent.`,

  redriveDryRunNoAuditTable: (table: string, cause: string, create: string): string =>
    `warning: the audit table ${table} cannot be read (${cause}), so --yes will be refused until it exists. Create it with "${create}", or ${OutboxMessages.auditTableDdl()}.`,

  /** A module option the CLI filled from `flag`, refused: the module's reason under the flag's name. */
  flagRefused: (flag: string, reason: string): string => `${flag}: ${reason}`,
} as const;
