/** Every message text of the inbox, in one place; each says how to fix what it reports. */
export const InboxMessages = {
  sequenceGap: (key: string, expected: number, received: number): string =>
    `Message ${received} of key ${JSON.stringify(key)} arrived before ${expected}: refused by the ` +
    `gap policy (onGap: 'reject'). Let the broker redeliver it, or use onGap 'hold' or 'accept'.`,
  invalidSequence: (problem: string, fix?: string): string =>
    `Invalid sequence: ${problem}. ` +
    (fix ??
      "Pass the message's x-outbox-key and x-outbox-sequence (sequenceOf(message) reads them)."),
  sequenceWithoutKey: (sequence: string, lookedAt: string): string =>
    `the message carries x-outbox-sequence ${sequence} but no key (looked for ${lookedAt})`,
  sequenceWithoutKeyFix: (): string =>
    'The gap guard needs both. Pass the whole message to sequenceOf(), not its headers (a ' +
    "Kafka message's key is its record key, an envelope's its key field); RabbitMqPublisher " +
    'sends x-outbox-key unless outboxHeaders is false, and ClientProxyPublisher over ClientRMQ ' +
    'sends none (docs/inbox.md#gap-guard).',
  unknownMessageShape: (what: string, received: string, reads: readonly string[]): string =>
    `${what} cannot read ${received}. It reads ${reads.join('; ')}.`,
  optionInvalid: (path: string, problem: string, fix: string): string =>
    `Invalid Inbox option "${path}": ${problem}. ${fix}`,
  identifierFix: (maxLength: number): string =>
    `Use 1 to ${maxLength} letters, digits or underscores, starting with a letter or underscore.`,
  dataSourceRequired: (): string =>
    'The inbox needs the TypeORM DataSource that holds the inbox table, or the connection of ' +
    'your database library: new Inbox(dataSource, { tableName }), new Inbox(pgOutbox(pool)), ' +
    'InboxModule.forRoot({ dataSource }) or InboxModule.forRoot({ connection }).',
  dataSourceAndConnection: (): string =>
    'InboxModule was given both a dataSource and a connection: give the one whose database ' +
    "holds the inbox table and your handlers' business tables.",
  onConnection: (what: string): string =>
    `${what} needs a TypeORM DataSource, and this inbox runs on a connection: record the id ` +
    'in your own transaction with recordOnce(tx, { consumer, messageId }) and skip the work ' +
    'when it resolves to false (docs/inbox.md: "Without TypeORM").',
  transactionRequired: (): string =>
    'Inbox.recordOnce() needs the EntityManager of an open transaction (inside ' +
    'dataSource.transaction(async (manager) => …)): recorded outside one, the id would commit ' +
    "whether or not the handler's writes do.",
  transactionEndedBeforeRecord: (): string =>
    'Inbox.recordOnce() ran after its transaction had ended (a ROLLBACK or COMMIT the app sent ' +
    'before the recordOnce it had not awaited): nothing was recorded. Await recordOnce() ' +
    'before ending the transaction, and do the work only when it resolves to true.',
  foreignManager: (): string =>
    'The DataSource or EntityManager passed to handleOnce() belongs to another DataSource than ' +
    "the inbox's: the message id would not be recorded in the handler's transaction. Pass the " +
    "inbox's DataSource, or a manager of one of its transactions.",
  invalidEntry: (field: 'messageId' | 'consumer', problem: string): string =>
    `Invalid inbox ${field}: ${problem}.`,
  messageIdMissing: (source: string, looked: string): string =>
    `The ${source} message carries no message id (looked for ${looked}). Messages published by ` +
    'nestjs-outbox always carry one; a message from another producer needs an id of its own ' +
    'before it can be deduplicated.',
} as const;
