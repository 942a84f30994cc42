/** The `outbox` command's own texts: what it says when it cannot do what was asked. */
export const CliMessages = {
  driverMissing: (database: string, driver: string, npmPackage: string): string =>
    `DATABASE_URL names a ${database} database, which the outbox command reaches through ${driver} (the "${npmPackage}" package): it is not installed here. Install it in the project ("npm i ${npmPackage}"); TypeORM is not needed.`,

  driverUnusable: (missing: string): string =>
    `The installed database driver does not export ${missing}: is it a version the outbox supports (docs/without-typeorm.md)?`,

  cannotConnect: (where: string, reason: string): string => `Cannot connect to ${where}: ${reason}`,

  sqliteFileMissing: (file: string): string =>
    `The SQLite database file ${file} does not exist (create it with "outbox schema migrate").`,

  messageNotFound: (messageId: string, table: string): string =>
    `No message ${messageId} in the outbox table ${table}: never enqueued in it, or deleted since (delivered rows go after cleaner.deliveredRetentionMs, dead ones when purged). Check --table and --schema.`,

  notDeadLetters: (done: string, ids: readonly string[]): string =>
    `Not dead letters, so not ${done}: ${ids.join(', ')}.`,
} as const;
