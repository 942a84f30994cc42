/** Which table a message is about, as the options name it. */
export interface OutboxTableRef {
  readonly tableName: string;
  readonly schema?: string;
  /** The per-key lock table beside it, on MySQL/MariaDB. */
  readonly keyLock: boolean;
}

/** The CLI command that creates the table, with the options that name it. */
const schemaMigrate = ({ tableName, schema }: OutboxTableRef): string =>
  'npx outbox schema migrate' +
  (tableName === 'outbox' ? '' : ` --table ${tableName}`) +
  (schema === undefined ? '' : ` --schema ${schema}`);

const dropIt = ({ tableName, keyLock }: OutboxTableRef): string =>
  keyLock ? `drop it and ${tableName}_key_lock` : 'drop it';

/**
 * Every message text the module produces, in one place so wording stays consistent and each
 * error says how to fix what it reports.
 */
export const OutboxMessages = {
  optionInvalid: (path: string, problem: string, fix: string, subject = 'OutboxModule'): string =>
    `Invalid ${subject} option "${path}": ${problem}. ${fix}`,
  unknownOption: (
    path: string,
    suggestion: string | undefined,
    known: readonly string[],
    subject = 'OutboxModule',
  ): string =>
    `Invalid ${subject} options: ${path} is not an option` +
    (suggestion !== undefined
      ? `; did you mean ${suggestion}?`
      : `. Known options here: ${known.join(', ')}.`),
  extraInFactoryResult: (key: string): string =>
    `Invalid OutboxModule option "${key}": it decides which providers the module has, so it is ` +
    `read when the module is defined, not from the options the factory returns. Pass it next ` +
    `to useFactory: OutboxModule.forRootAsync({ ${key}: ..., useFactory: ... }).`,
  moduleOptionBesideFactory: (key: string): string =>
    `Invalid OutboxModule.forRootAsync() option "${key}": it is a module option, so it belongs ` +
    `in the object that useFactory returns (or createOutboxOptions() of useClass/useExisting).`,
  transactionRequired: (): string =>
    'OutboxService.enqueue() needs the EntityManager of an open transaction: call it inside ' +
    'dataSource.transaction(async (manager) => outbox.enqueue(event, manager)) or with ' +
    'queryRunner.manager after queryRunner.startTransaction(), or configure the ambient ' +
    'transaction (see "3. Enqueue inside your transaction" in the README: ' +
    'README.md#3-enqueue-inside-your-transaction). Writing an outbox row outside the business ' +
    'transaction would break the outbox guarantee.',
  connectionTransactionRequired: (): string =>
    'OutboxService.enqueue() needs the open transaction of the connection OutboxModule was ' +
    'given: pass its transaction handle (with pgOutbox(pool), the PoolClient you ran BEGIN on) ' +
    'or configure ambientTransaction (docs/without-typeorm.md#enqueue-in-your-transaction). ' +
    'Writing an outbox row outside the business transaction would break the outbox guarantee.',
  pgTransactionRequired: (status: string): string =>
    `OutboxService.enqueue() needs a node-postgres client inside an open transaction (its ` +
    `transaction status is ${status}): run client.query('BEGIN') on a client of the pool given ` +
    `to pgOutbox(pool), enqueue with that client, then COMMIT (docs/without-typeorm.md#enqueue-in-your-transaction). ` +
    'Writing an outbox row outside the business transaction would break the outbox guarantee.',
  foreignTransaction: (handle: string, owner: string, fix: string): string =>
    `The ${handle} belongs to another ${owner} than the one OutboxModule was given: the ` +
    `message would not commit with the outbox table. ${fix}`,
  incompleteMessage: (problem: string): string =>
    `The message is a plain object but ${problem}: a plain message needs { topic, payload } ` +
    `(and optionally type, key, headers, messageId, dedupeKey, availableAt, delayMs); an ` +
    `instance of a class decorated with @OutboxEvent({ topic: '...' }) needs neither.`,
  missingEventMetadata: (className: string): string =>
    `Class ${className} has no @OutboxEvent() metadata: decorate it with ` +
    `@OutboxEvent({ topic: '...' }) or enqueue a plain message { topic, payload }.`,
  notSerialisable: (detail: string): string =>
    `The payload is not JSON-serialisable (${detail}). Payloads must be plain data: objects, ` +
    `arrays, strings, finite numbers, booleans and null.`,
  payloadTooLarge: (bytes: number, limit: number): string =>
    `The payload is ${bytes} bytes, over the limit of ${limit} bytes (option maxPayloadBytes). ` +
    `Store large data elsewhere and enqueue a reference to it.`,
  invalidField: (field: string, problem: string): string => `Invalid message ${field}: ${problem}.`,
  reservedHeader: (name: string): string =>
    `Header "${name}" is reserved (the module sets x-outbox-* itself; CC and BCC would reroute ` +
    `RabbitMQ messages). Use another header name.`,
  tableMissing: (table: string, reason: string, ref: OutboxTableRef): string =>
    `The outbox table ${table} cannot be read (${reason}): run the migrations from ` +
    `createOutboxMigration(), or "${schemaMigrate(ref)}" with DATABASE_URL set, before ` +
    `starting the app. A table made by 0.1 lacks columns this version uses: drain it, ` +
    `${dropIt(ref)}, and run either again (README: "Upgrading from 0.1").`,
  tableOutdated: (table: string, reason: string, ref: OutboxTableRef): string =>
    `The outbox migration cannot complete: the table ${table} exists but lacks columns this ` +
    `version uses (${reason}), so it was made by 0.1. Drain it, ${dropIt(ref)}, and run the ` +
    `migrations again, or "${schemaMigrate(ref)}" with DATABASE_URL set (README: "Upgrading ` +
    `from 0.1").`,
  tablePadSpace: (table: string, columns: string, ref: OutboxTableRef): string =>
    `The outbox table ${table} compares ${columns} ignoring trailing spaces (a PAD ` +
    `SPACE collation, as tables made before 0.3 do), so 'k' and 'k ' would be one key and a ` +
    `purge of topic 'orders' would also take 'orders '. Run "${schemaMigrate(ref)}" with ` +
    `DATABASE_URL set, or the migrations from createOutboxMigration(): they change those ` +
    `columns to a NO PAD binary collation in place, rows kept (the ALTER rebuilds the table).`,
  keyLockTableBroken: (table: string, problem: string, ref: OutboxTableRef): string =>
    `The key-lock table ${table} that serialises enqueues per key on MySQL/MariaDB ${problem}: ` +
    `without every one of its rows, writers of a key would no longer commit in ` +
    `order. Run "${schemaMigrate(ref)}" with DATABASE_URL set, or the migrations from ` +
    `createOutboxMigration(), which create and fill it (they never remove rows), before ` +
    `starting the app.`,
  duplicateInstance: (name: string): string =>
    `Two OutboxModule instances named "${name}" in one app: the one registered last would ` +
    `silently take the place of the other. Give each its own name, ` +
    `OutboxModule.forRoot({ name: 'audit', ... }), and inject the named one with ` +
    `@InjectOutbox('audit') (its OutboxService) or @InjectOutboxAdmin('audit').`,
  shutdownHooksMissing: (leaseMs: number): string =>
    'Nothing handles SIGTERM in this process: call app.enableShutdownHooks() in main.ts ' +
    '(README: "Usage"). Without it SIGTERM ends the process at once, and the messages the ' +
    `dispatcher has claimed stay leased until dispatcher.leaseMs (${leaseMs} ms) ends, each ` +
    'with an attempt counted, instead of being released for the next instance.',
  /** `supported`: the driver types, already listed ("a, b or c"). */
  unsupportedDatabase: (type: string, supported: string): string =>
    `Database type "${type}" is not supported by nestjs-outbox: use ${supported}.`,
  sqliteNeedsFile: (): string =>
    'The outbox dispatcher on SQLite needs a database file (not ":memory:"), because it uses a ' +
    'connection of its own so that its writes never join an application transaction.',
  /** `handle`: what the app passed; `fix`: how its library opens the transaction to pass. */
  ormTransactionRequired: (handle: string, fix: string): string =>
    `OutboxService.enqueue() needs the handle of an open transaction, not ${handle}: ${fix} ` +
    'Writing an outbox row outside the business transaction would break the outbox guarantee.',
  /** `library`: the ORM and driver; `fix`: what it accepts instead. */
  ormUnsupportedClient: (library: string, fix: string): string =>
    `The outbox cannot run on ${library}: ${fix}`,
} as const;
