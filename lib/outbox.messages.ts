/** Which table a message is about, as the options name it. */
export interface OutboxTableRef {
  readonly tableName: string;
  readonly schema?: string;
  /** The per-key lock table beside it, on MySQL/MariaDB. */
  readonly keyLock: boolean;
}

/** What a lost PostgreSQL prepared statement means and how to fix it, for `what` that failed. */
const pgPreparedStatementLost = (what: string, reason: string, outcome: string): string =>
  `${what} failed on this connection (${reason}): something between the app and PostgreSQL ` +
  `does not keep prepared statements per connection, most often PgBouncer in transaction mode ` +
  `before 1.21 or with max_prepared_statements = 0. Set preparedStatements: false in ` +
  `OutboxModule's options, or let the pooler keep them (PgBouncer 1.21+: ` +
  `max_prepared_statements > 0). ${outcome}`;

/** The CLI command that creates the table, with the options that name it. */
const schemaMigrate = ({ tableName, schema }: OutboxTableRef): string =>
  'npx outbox schema migrate' +
  (tableName === 'outbox' ? '' : ` --table ${tableName}`) +
  (schema === undefined ? '' : ` --schema ${schema}`);

/** The options of the migration helpers that name the table, as code: `{ tableName: 'x' }`. */
const migrationArgs = ({ tableName, schema }: OutboxTableRef): string => {
  const fields = [
    ...(tableName === 'outbox' ? [] : [`tableName: '${tableName}'`]),
    ...(schema === undefined ? [] : [`schema: '${schema}'`]),
  ];
  return fields.length === 0 ? '' : `{ ${fields.join(', ')} }`;
};

/** The migrate command and the migrations' options that add the step of `option` too. */
const migrateWith = (ref: OutboxTableRef, option: string): string =>
  `"${schemaMigrate(ref)} --with ${option}" with DATABASE_URL set, or the DataSource's ` +
  `...outboxMigrations({ ${[
    ...(ref.tableName === 'outbox' ? [] : [`tableName: '${ref.tableName}'`]),
    ...(ref.schema === undefined ? [] : [`schema: '${ref.schema}'`]),
    `with: ['${option}']`,
  ].join(', ')} })`;

/** `migrationArgs` as the second argument of a call: `, { tableName: 'x' }`, or nothing. */
const withArgs = (ref: OutboxTableRef): string =>
  migrationArgs(ref) === '' ? '' : `, ${migrationArgs(ref)}`;

const dropIt = ({ tableName, keyLock }: OutboxTableRef): string =>
  keyLock ? `drop it and ${tableName}_key_lock` : 'drop it';

/**
 * Every message text the module produces, in one place so wording stays consistent and each
 * error says how to fix what it reports.
 */
export const OutboxMessages = {
  externalDelivery: (outbox: string, call: string): string =>
    `The dispatcher of outbox "${outbox}" cannot ${call}: its delivery is 'external' (Debezium or another engine reading the database's log delivers its messages, and a second delivery would publish them twice). Set delivery: 'poll' (or logTailing()) to deliver with the module (docs/debezium.md#moving-between-the-dispatcher-and-debezium).`,
  deliveryNotAMode: (shown: string): string =>
    `Invalid OutboxModule option "delivery": ${shown} is not a delivery mode. Use 'poll' (the default: the module's dispatcher claims messages from the table), logTailing() from nestjs-outbox/log-tailing (the dispatcher reads them from the database's log), or 'external' (an engine reading the log, such as Debezium, delivers; docs/options.md).`,
  /** The two options that spelt the delivery mode before 0.3.0, still read: what to write instead. */
  deliveryDeprecated: (outbox: string, written: string, write: string): string =>
    `OutboxModule "${outbox}": ${written} is deprecated and will be removed in 0.4. Write ${write} instead: the delivery mode is one option now (docs/upgrading.md#one-option-for-the-delivery-mode).`,
  observeBesideDelivery: (delivery: string): string =>
    `Invalid OutboxModule option "dispatcher.observe": it is given beside delivery: ${delivery}, and the delivery mode is one option now. Remove dispatcher.observe and say it in delivery alone: delivery: 'poll' or delivery: logTailing(…) (docs/upgrading.md#one-option-for-the-delivery-mode).`,
  logTailingWithExternalDelivery: (): string =>
    'Invalid OutboxModule option "dispatcher.observe": a log observer is given with delivery \'external\', where no dispatcher runs to read the log. Leave dispatcher.observe out (the external engine reads the log), or write delivery: logTailing() to deliver with the module.',
  droppedByExternalDelivery: (what: string): string =>
    `${what} cannot be delivered with delivery 'external': Debezium's outbox router publishes the JSON payload of each row as soon as it is committed (docs/debezium.md#what-changes-in-the-app)`,
  /** What admin, the console and `outbox why` say about a message in an external-delivery table. */
  externalDeliveryStatus: (): string =>
    'delivery is external (Debezium): the module writes messages and an engine reading the database log publishes them; the table does not record what it delivered',
  policyNotApplied: (className: string, type: string, outbox: string): string =>
    `${className} (type ${JSON.stringify(type)}) has an @OutboxEvent policy, but outbox "${outbox}" does not apply it: its dispatcher delivers this type under the module's defaults. List the class in the module's events option (or give the policy by type in policies).`,
  badFallback: (problem: string): string => `Invalid @OnOutboxDeadLetter(): ${problem}.`,
  messageExpired: (
    policy: string,
    maxAgeMs: number,
    ageMs: number,
    lastFailure: string | undefined,
  ): string =>
    `expired: not delivered within ${maxAgeMs} ms of its enqueue (policy '${policy}': maxAgeMs ${maxAgeMs}); ` +
    (lastFailure === undefined
      ? `${Math.round(ageMs)} ms old when claimed, so it was not published`
      : `its next retry would fall past that (${Math.round(ageMs)} ms old); last failure: ${lastFailure}`),
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
  /**
   * An options object given to a method at run time (`OutboxAdmin.redrive()`, `enqueue()`) with
   * a key this build does not read; said as `unknownOption` says it at bootstrap, with the
   * accepted keys always listed (the caller is a script, not a config file beside the docs).
   */
  unknownRuntimeOption: (
    subject: string,
    path: string,
    suggestion: string | undefined,
    accepted: readonly string[] = [],
  ): string =>
    `Invalid ${subject} options: ${path} is not an option` +
    (suggestion !== undefined ? `; did you mean ${suggestion}?` : '.') +
    ` Accepted options: ${accepted.length > 0 ? accepted.join(', ') : 'none'}. Nothing was done.`,
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
    'given: pass its transaction handle (with pgOutbox(pool), the PoolClient you ran BEGIN on; ' +
    'with mysql2Outbox(pool), the PoolConnection you ran beginTransaction() on; with ' +
    'betterSqlite3Outbox(db), the Database after BEGIN; with kyselyOutbox(db), the Transaction) ' +
    'or configure ambientTransaction (docs/without-typeorm.md#enqueue-in-your-transaction). ' +
    'Writing an outbox row outside the business transaction would break the outbox guarantee.',
  pgTransactionRequired: (status: string): string =>
    `OutboxService.enqueue() needs a node-postgres client inside an open transaction (its ` +
    `transaction status is ${status}): run client.query('BEGIN') on a client of the pool given ` +
    `to pgOutbox(pool), enqueue with that client, then COMMIT (docs/without-typeorm.md#enqueue-in-your-transaction). ` +
    'Writing an outbox row outside the business transaction would break the outbox guarantee.',
  pgPoolGiven: (): string =>
    'OutboxService.enqueue() was given the pg Pool itself, which runs each statement on any free ' +
    'connection in a transaction of its own: the message would stay when your transaction rolls ' +
    "back. Pass the PoolClient you ran BEGIN on: const client = await pool.connect(); await client.query('BEGIN'); " +
    'await outbox.enqueue(event, client); then COMMIT and client.release() ' +
    '(docs/without-typeorm.md#enqueue-in-your-transaction).',
  mysql2TransactionRequired: (): string =>
    'OutboxService.enqueue() needs a mysql2 connection inside an open transaction (the server ' +
    'reports none on it): run await connection.beginTransaction() on a connection of the pool ' +
    'given to mysql2Outbox(pool), enqueue with that connection, then commit() ' +
    '(docs/without-typeorm.md#enqueue-in-your-mysql2-transaction). Writing an outbox row ' +
    'outside the business transaction would break the outbox guarantee.',
  betterSqlite3TransactionRequired: (): string =>
    'OutboxService.enqueue() needs the better-sqlite3 Database inside an open transaction ' +
    "(db.inTransaction is false): run db.exec('BEGIN IMMEDIATE'), await the enqueue with db, " +
    "then db.exec('COMMIT'). It cannot run inside db.transaction(fn), whose function must be " +
    'synchronous (docs/without-typeorm.md#enqueue-in-your-better-sqlite3-transaction). Writing ' +
    'an outbox row outside the business transaction would break the outbox guarantee.',
  kyselyTransactionRequired: (): string =>
    'OutboxService.enqueue() needs a Kysely Transaction that is still open: call it inside ' +
    'db.transaction().execute(async (trx) => outbox.enqueue(event, trx)) on the Kysely instance ' +
    'given to kyselyOutbox(db), or with the trx of db.startTransaction().execute() before its ' +
    'commit (docs/without-typeorm.md#enqueue-in-your-kysely-transaction). Writing an outbox ' +
    'row outside the business transaction would break the outbox guarantee.',
  transactionEndedBeforeWrite: (): string =>
    'OutboxService.enqueue() reached the database after the transaction it was given had ended ' +
    '(committed or rolled back), so the message was not written: await the enqueue before the ' +
    'transaction commits, and before the code that rolls it back runs. Writing the row then ' +
    'would commit it on its own, outside the business transaction.',
  insertIncomplete: (table: string): string =>
    `An enqueue's insert into "${table}" wrote fewer rows than it was given, inside an open ` +
    'transaction: the enqueue failed rather than lose a message. Check the table with ' +
    '`npx outbox schema status`.',
  foreignTransaction: (handle: string, owner: string, fix: string): string =>
    `The ${handle} belongs to another ${owner} than the one OutboxModule was given: the ` +
    `message would not commit with the outbox table. ${fix}`,
  preparedStatementLost: (reason: string): string =>
    pgPreparedStatementLost(`The enqueue's prepared statement`, reason, 'Nothing was written.'),
  dispatchPreparedStatementLost: (reason: string): string =>
    pgPreparedStatementLost(
      `A dispatcher statement's prepared statement`,
      reason,
      'That transaction was rolled back, no message changed, and the outbox runs its own ' +
        'statements unprepared from now on.',
    ),
  mysqlPreparedStatementLost: (reason: string): string =>
    `The enqueue's prepared statement failed on this connection (${reason}): something between ` +
    `the app and MySQL/MariaDB does not keep prepared statements per connection (a proxy that ` +
    `multiplexes connections, such as ProxySQL), or the server's max_prepared_stmt_count is ` +
    `reached. Set preparedStatements: false in OutboxModule's options, or raise ` +
    `max_prepared_stmt_count. Nothing was written.`,
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
  refusedByPublisher: (problem: string): string =>
    `The publisher cannot deliver this message: ${problem} Nothing was written.`,
  tenantsOff: (): string =>
    `The message names a tenant, but the module's tenants option is off. Set tenants: {} ` +
    `(docs/tenants.md) after "outbox schema migrate" added the tenant_id column, or leave the ` +
    `tenant out.`,
  reservedHeader: (name: string): string =>
    `Header "${name}" is reserved (the module sets x-outbox-* itself; CC and BCC would reroute ` +
    `RabbitMQ messages). Use another header name.`,
  databaseUnreachable: (table: string, reason: string): string =>
    `The outbox could not check its table ${table} at bootstrap: the database does not answer ` +
    `(${reason}). Check the connection settings (host, port, database name, credentials) and ` +
    `that the database is up; a pool or client that was ended (for example by an earlier ` +
    `app's shutdown in the same process) cannot be used again.`,
  databaseClosed: (table: string): string =>
    `The outbox cannot start on its table ${table}: the connection it was given was ended (an ` +
    `ended pool or a closed Database) and cannot run a statement again. Give the module a pool ` +
    `that this app ends at its own shutdown: one made by a provider's factory, not one shared ` +
    `by several apps in one process (tests that create an app per test).`,
  tableMissing: (table: string, reason: string, ref: OutboxTableRef): string =>
    `The outbox table ${table} cannot be read (${reason}): create it before starting the ` +
    `app, with the migrations from outboxMigrations() (TypeORM), "${schemaMigrate(ref)}" with ` +
    `DATABASE_URL set, createOutboxTable(<connection>.sql${withArgs(ref)}) on any connection ` +
    `(pgOutbox(pool), kyselyOutbox(db), …), or, in another migration tool, the statements of ` +
    `outboxTableDdl(<dialect>${withArgs(ref)})${migrationArgs(ref) === '' ? ' ("npx outbox schema print")' : ''}. A table made by 0.1 lacks ` +
    `columns this version uses: drain it, ${dropIt(ref)}, and create it again ` +
    `(docs/upgrading.md: "Upgrading from 0.1").`,
  tableOutdated: (table: string, reason: string, ref: OutboxTableRef): string =>
    `The outbox migration cannot complete: the table ${table} exists but lacks columns this ` +
    `version uses (${reason}), so it was made by 0.1. Drain it, ${dropIt(ref)}, and run the ` +
    `migrations again, or "${schemaMigrate(ref)}" with DATABASE_URL set (README: "Upgrading ` +
    `from 0.1").`,
  tablePadSpace: (table: string, columns: string, ref: OutboxTableRef): string =>
    `The outbox table ${table} compares ${columns} ignoring trailing spaces (a PAD ` +
    `SPACE collation, as tables made before 0.3 do), so 'k' and 'k ' would be one key and a ` +
    `purge of topic 'orders' would also take 'orders '. Run "${schemaMigrate(ref)}" with ` +
    `DATABASE_URL set, the migrations from outboxMigrations(), or (with another migration ` +
    `tool) the statements of outboxTableDdl() or "npx outbox schema print" once more: they ` +
    `change those columns to a NO PAD binary collation in place, rows kept (the ALTER ` +
    `rebuilds the table).`,
  historyTableMissing: (history: string, reason: string, ref: OutboxTableRef): string =>
    `The attempt-history table ${history} of the outbox table ${ref.tableName} cannot be read ` +
    `(${reason}): tables made by earlier versions lack it. Run "${schemaMigrate(ref)}" with DATABASE_URL ` +
    `set, which adds it in place (rows kept), or add ...outboxMigrations(${migrationArgs(ref)}) ` +
    `to the DataSource's migrations in place of createOutboxMigration(${migrationArgs(ref)}) ` +
    `(its first step is that same migration, already recorded; the next one adds the table), ` +
    `before starting the app (docs/upgrading.md: "Upgrading from 0.2").`,
  archiveTableMissing: (archive: string, reason: string, ref: OutboxTableRef): string =>
    `cleaner.archive is on, but the archive table ${archive} cannot be read (${reason}). ` +
    `Create it with "${schemaMigrate(ref)} --archive" (DATABASE_URL set), ` +
    `ensureOutboxArchiveTable(dataSource${migrationArgs(ref) === '' ? '' : `, ${migrationArgs(ref)}`}) ` +
    `or createOutboxArchiveMigration(${migrationArgs(ref)}) in the DataSource's migrations ` +
    `(docs/outbox-table.md: "Archive"), or turn cleaner.archive off.`,
  payloadColumnsMissing: (table: string, reason: string, ref: OutboxTableRef): string =>
    `The outbox table ${table} lacks the binary-payload and broker-attribute columns that ` +
    `schema step 4 adds (${reason}), which this version reads. Run "${schemaMigrate(ref)}" with ` +
    `DATABASE_URL set, which adds them in place (rows kept, no table rewrite), or run the ` +
    `DataSource's ...outboxMigrations(${migrationArgs(ref)}) (step 4 adds them), before ` +
    `starting the app (docs/upgrading.md: "Upgrading from 0.2").`,
  keySequenceMissing: (table: string, reason: string, ref: OutboxTableRef): string =>
    `ordering.sequence is on, but the outbox table ${table} lacks the key_seq column or the ` +
    `counter table ${ref.tableName}_key_seq that schema step 6 adds (${reason}); a table is ` +
    `made without them unless asked. Run ${migrateWith(ref, 'sequence')} (step 6 adds them), ` +
    `before starting the app, or leave ordering.sequence off (docs/upgrading.md).`,
  tenantColumnMissing: (table: string, reason: string, ref: OutboxTableRef, step: number): string =>
    `The outbox table ${table} lacks the tenant_id column and its index that schema step ${step} ` +
    `adds (${reason}), which the tenants option needs; a table is made without them unless ` +
    `asked. Run ${migrateWith(ref, 'tenants')}, which adds them in place (rows kept; on ` +
    `PostgreSQL add --online not to block writes on a large table), before starting the app, ` +
    `or leave the tenants option out (docs/upgrading.md, docs/tenants.md).`,
  partitionsMissing: (table: string, reason: string, ref: OutboxTableRef, step: number): string =>
    `The outbox table ${table} lacks what schema step ${step} adds (the delivery_partition ` +
    `column, the dispatchers' and owners' tables and their columns: ${reason}), which ` +
    `dispatcher.claims 'partitions' needs; a table is made without them unless asked. Run ` +
    `${migrateWith(ref, 'partitions')}, which adds what is missing (rows kept; add --online not to block ` +
    `writes on a large table), before starting the app, or leave dispatcher.claims out ` +
    `(its dispatchers then lease rows; docs/upgrading.md, docs/delivery.md "Partitions").`,
  claimsUndecided: (tableName: string, schema: string | undefined): string => {
    const table = schema === undefined ? tableName : `${schema}.${tableName}`;
    return (
      `The outbox could not ask the table ${table} whether it has delivery partitions: its ` +
      `database connection was not open when the module started, so its dispatchers lease ` +
      `rows. Open the connection before the app starts (TypeOrmModule does), or set ` +
      `dispatcher.claims: 'partitions' (PostgreSQL, schema step 9) or 'leases' to choose ` +
      `without asking (docs/delivery.md, "Partitions").`
    );
  },
  partitionsDefaultWithoutStep: (
    tableName: string,
    schema: string | undefined,
    reason: string,
  ): string => {
    const ref = { tableName, schema, keyLock: false };
    const table = schema === undefined ? tableName : `${schema}.${tableName}`;
    return (
      `The outbox table ${table} has no delivery partitions (schema step 9: ${reason}), so its ` +
      `dispatchers lease rows. On PostgreSQL dispatcher.claims defaults to 'partitions' where ` +
      `the table has them: run ${migrateWith(ref, 'partitions')} (add --online not to block ` +
      `writes on a large table) and restart, or set dispatcher.claims: 'leases' to keep row ` +
      `leases without this notice (docs/delivery.md, "Partitions").`
    );
  },
  claimCheckTableMissing: (
    table: string,
    reason: string,
    ref: OutboxTableRef,
    step: number,
  ): string =>
    `The outbox table ${table} lacks the claim-check table that schema step ${step} adds ` +
    `(${reason}), which the claimCheck option needs; a table is made without it unless asked. ` +
    `Run ${migrateWith(ref, 'claimCheck')} before starting the app, or leave claimCheck out ` +
    `(docs/claim-check.md).`,
  unknownStepOption: (given: string, known: string): string =>
    `with: "${given}" is not an option with a schema step of its own. Name any of ` +
    `${known} (the table gets those steps too), or leave with ` +
    `out (docs/upgrading.md, "Steps for one option").`,
  erasureOff: (): string =>
    'the message marks personal data, but the module has no erasure option to seal it with: ' +
    'give OutboxModule erasure: { masterKey } or { keyWrapper } (docs/erasure.md), or leave ' +
    'personal out',
  subjectKeysTableMissing: (
    table: string,
    reason: string,
    ref: OutboxTableRef,
    step: number,
  ): string =>
    `The outbox table ${table} lacks the erasure's key and use tables that schema step ${step} ` +
    `adds (${reason}), which the erasure option needs; a table is made without them unless ` +
    `asked. Run ${migrateWith(ref, 'erasure')} before starting the app, or leave erasure out ` +
    `(docs/erasure.md).`,
  partitionsUnsupported: (table: string, dialect: string): string =>
    `dispatcher.claims 'partitions' is not available on ${dialect === 'mysql' ? 'MySQL/MariaDB' : dialect === 'sqlite' ? 'SQLite' : dialect} in this release (the outbox ` +
    `table ${table}): it runs on PostgreSQL. Leave dispatcher.claims out (on this database ` +
    `dispatchers lease rows) or set it to 'leases' (docs/delivery.md, "Partitions").`,
  deliveryPartitionsOnlyPostgres: (table: string, dialect: string): string =>
    `Delivery partitions are not in use on ${table}: only PostgreSQL has them ` +
    `(dispatcher.claims: 'partitions'), and this table is on ${dialect === 'mysql' ? 'MySQL/MariaDB' : dialect === 'sqlite' ? 'SQLite' : dialect}; ` +
    `its dispatchers lease rows ("outbox leases" lists the expired ones).`,
  deliveryPartitionsNoStep: (table: string, reason: string, step: number): string =>
    `Delivery partitions are not in use on ${table}: it lacks the tables schema step ${step} ` +
    `makes (${reason}). Its dispatchers lease rows; dispatcher.claims: 'partitions' needs ` +
    `"npx outbox schema migrate" first (docs/delivery.md, "Partitions").`,
  deliveryPartitionsNoDispatcher: (table: string, claims: 'leases' | 'partitions' | null): string =>
    `Delivery partitions are not in use on ${table}: no dispatcher delivers it by partitions ` +
    (claims === 'leases'
      ? `(this app's dispatcher.claims is 'leases': its dispatchers lease rows).`
      : claims === 'partitions'
        ? `now (this app's dispatcher.claims is 'partitions': none of its dispatchers is running, or they all stopped).`
        : `now (with dispatcher.claims 'leases' dispatchers lease rows; with ` +
          `'partitions', none is running).`),
  waitingIndexMissing: (table: string, ref: OutboxTableRef): string =>
    `The outbox table ${table} lacks the index of waiting messages (${ref.tableName}_waiting_idx) ` +
    `that schema step 5 adds: the dispatcher works without it, but every settle then probes ` +
    `each of its keys for waiting messages. Run "${schemaMigrate(ref)}" with DATABASE_URL set, ` +
    `or the DataSource's ...outboxMigrations(${migrationArgs(ref)}) (step 5 adds it), and ` +
    `restart the app (docs/upgrading.md: "The index of waiting messages (schema step 5)" has the ` +
    `non-blocking form for a large table).`,
  messageIdColumnUnsupported: (table: string, columnType: string): string =>
    `The column message_id of ${table} is ${columnType}: the outbox stores message ids (UUIDs) ` +
    `on MySQL/MariaDB as BINARY(16), or as CHAR(36) CHARACTER SET ascii in tables made before ` +
    `0.3, and can neither use nor convert another type. Change the column back to one of those ` +
    `two (docs/outbox-table.md, "Message ids on MySQL and MariaDB"), or use a table made by ` +
    `"outbox schema migrate".`,
  messageIdLayoutMixed: (table: string, detail: string, ref: OutboxTableRef): string =>
    `The message ids of the outbox table ${table} and the tables beside it are stored in two ` +
    `layouts (${detail}), as an interrupted conversion leaves them. With the app stopped, run ` +
    `"${schemaMigrate(ref)} --binary-ids" with DATABASE_URL set (or ` +
    `migrateOutboxToBinaryIds()): it finishes the conversion to BINARY(16), every row kept ` +
    `(docs/outbox-table.md, "Message ids on MySQL and MariaDB").`,
  messageIdsUnconvertible: (table: string, count: number, type: string): string =>
    `${count} row(s) of ${table} have a message_id that is not a UUID in its ${type} form, so ` +
    `the conversion of the message ids would lose them; nothing was changed. Find them with ` +
    `"SELECT * FROM ${table} WHERE message_id NOT REGEXP '^[0-9a-fA-F-]{36}$'" (CHAR(36)), ` +
    `repair or delete them, and run the conversion again.`,
  messageIdConversionMissing: (table: string): string =>
    `The outbox table ${table} does not exist, so there are no message ids to convert: ` +
    `"outbox schema migrate" creates it with BINARY(16) ids already.`,
  binaryIdsUnsupported: (dialect: string): string =>
    `Binary message ids are a MySQL/MariaDB layout: on ${dialect} the outbox table keeps its ` +
    `ids as they are (PostgreSQL's uuid type already stores 16 bytes). Leave --binary-ids out.`,
  keyLockTableBroken: (table: string, problem: string, ref: OutboxTableRef): string =>
    `The key-lock table ${table} that serialises enqueues per key on MySQL/MariaDB ${problem}: ` +
    `without every one of its rows, writers of a key would no longer commit in ` +
    `order. Run "${schemaMigrate(ref)}" with DATABASE_URL set, or the migrations from ` +
    `outboxMigrations(), which create and fill it (they never remove rows), before ` +
    `starting the app.`,
  duplicateInstance: (name: string): string =>
    `Two OutboxModule instances named "${name}" in one app: the one registered last would ` +
    `silently take the place of the other. Give each its own name, ` +
    `OutboxModule.forRoot({ name: 'audit', ... }), and inject the named one with ` +
    `@InjectOutbox('audit') (its OutboxService) or @InjectOutboxAdmin('audit').`,
  shutdownHooksMissing: (dispatcher: {
    readonly claims: 'leases' | 'partitions';
    readonly leaseMs: number;
    readonly partitionTimeoutMs: number;
  }): string =>
    'Nothing handles SIGTERM in this process: call app.enableShutdownHooks() in main.ts ' +
    '(README: "Usage"). Without it SIGTERM ends the process at once, and ' +
    (dispatcher.claims === 'partitions'
      ? `its delivery partitions stay held until their heartbeat runs out ` +
        `(dispatcher.partitionTimeoutMs, ${dispatcher.partitionTimeoutMs} ms) instead of being ` +
        'handed to the next instance at once; what it was publishing is published again then.'
      : `the messages the dispatcher has claimed stay leased until dispatcher.leaseMs ` +
        `(${dispatcher.leaseMs} ms) ends, each with an attempt counted, instead of being ` +
        'released for the next instance.'),
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
  tableLayoutMismatch: (table: string, expected: string, found: string, fix: string): string =>
    `The outbox table ${table} is ${found}, but the options ask for ${expected}: ${fix}`,
  partitioningUnsupported: (dialect: string): string =>
    `The outbox cannot partition its table on ${dialect}: only PostgreSQL and MySQL/MariaDB ` +
    `have partitioned tables. Leave the partitioning option out (the plain table and its ` +
    `cleaner serve ${dialect}).`,
  /** `steps`: the SQL that converts the table by hand, one statement per line. */
  partitionConversionRefused: (table: string, interval: string, steps: string): string =>
    `The outbox table ${table} exists unpartitioned; the outbox does not convert it to a ` +
    `table partitioned by ${interval} by itself, because that rewrites every row under an ` +
    `exclusive lock (enqueues and claims wait for the whole copy). Convert it by hand in a ` +
    `quiet moment (docs/partitioning.md, "Converting a plain table"):\n${steps}`,
  /** `library`: the ORM and driver; `fix`: what it accepts instead. */
  ormUnsupportedClient: (library: string, fix: string): string =>
    `The outbox cannot run on ${library}: ${fix}`,
  bridgeWriteUnsettled: (count: number): string =>
    `The transaction ended while ${count} outbox write(s) of an event-bus bridge were still ` +
    'running: an EventBus.publish()/publishAll() or EventEmitter2.emitAsync() of an @OutboxEvent ' +
    'was not awaited. The transaction was rolled back so that it cannot commit without its ' +
    'message: await the call (docs/event-bus.md#await-the-publish).',
  bridgeWriteFailed: (): string =>
    'An outbox write of an event-bus bridge failed in this transaction (see the cause), so the ' +
    'transaction was rolled back instead of committing without its message ' +
    '(docs/event-bus.md#await-the-publish).',
  bridgeUnguarded: (call: string): string =>
    `${call} of an @OutboxEvent inside a transaction whose @nestjs-cls/transactional adapter is ` +
    'not wrapped with guardOutboxWrites(): wrap it (new ClsPluginTransactional({ adapter: ' +
    'guardOutboxWrites(new TransactionalAdapterPrisma(…)) })) so that the write cannot escape ' +
    'the transaction, or set requireGuard: false (docs/event-bus.md#guard-the-transaction).',
  bridgeSynchronousEmit: (): string =>
    'EventEmitter2.emit() of an @OutboxEvent inside a transaction: emit() cannot wait for the ' +
    'outbox write, which would run after the transaction ends. Use await ' +
    'eventEmitter.emitAsync(…) (docs/event-bus.md#nestjsevent-emitter).',
  bridgeTransactionRequired: (call: string): string =>
    `${call} of an @OutboxEvent outside a transaction: the event would be lost to the outbox. ` +
    'Publish it inside a @Transactional() method (with ambientTransaction: ' +
    "fromClsTransactionHost(txHost) on OutboxModule), or set outsideTransaction: 'publish' to " +
    'hand such events to the in-memory handlers only (docs/event-bus.md#outside-a-transaction).',
  /**
   * How to make the audit table from code: the one DDL function every message about a missing
   * audit table names (the admin API's, the console's, the outbox command's).
   */
  auditTableDdl: (): string => 'in a migration with the statements of outboxAuditTableDdl(dialect)',
  redriveNoAuditTable: (table: string, cause: string): string =>
    `Re-drive refused: the audit table ${table} it must be recorded in cannot be read (${cause}). ` +
    `Create it ${OutboxMessages.auditTableDdl()}, with ensureOutboxConsoleAuditTable(dataSource) ` +
    '(nestjs-outbox/console) or new OutboxAuditStore(sqlPort).ensure(), or with the command ' +
    '"outbox schema migrate --audit"; nothing was sent.',
  erasureNoAuditTable: (table: string, cause: string): string =>
    `Erasure refused: the audit table ${table} it must be recorded in cannot be read (${cause}). ` +
    `Create it ${OutboxMessages.auditTableDdl()}, with ensureOutboxConsoleAuditTable(dataSource) ` +
    '(nestjs-outbox/console) or new OutboxAuditStore(sqlPort).ensure(), or with the command ' +
    '"outbox schema migrate --audit"; nothing was erased.',
  redriveTooMany: (max: number): string =>
    `Re-drive refused: the filter selects more than ${max} delivered messages (maxCount). ` +
    'Narrow it (a time range, a key), or raise maxCount; nothing was sent.',
  redriveSelectionChanged: (expected: number, actual: number): string =>
    `Re-drive refused: the filter selects ${
      actual === expected
        ? `${actual} delivered message(s) now, as many as confirmed but not the same ones`
        : `${actual} delivered message(s) now, not the ${expected} confirmed`
    } (messages were delivered or cleaned since the preview). Preview again and confirm ` +
    'what it shows; nothing was sent.',
  redriveEmpty: (): string =>
    'Re-drive refused: the filter selects no delivered message (cleaned rows are only found ' +
    'in <table>_archive with cleaner.archive on); nothing was sent.',
} as const;
