import type { EntityManager } from 'typeorm';

/** Which message, for which consumer: the inbox's primary key. */
export interface InboxEntry {
  /**
   * The message's stable id: for messages from nestjs-outbox, the `x-outbox-message-id` header
   * (see the `messageIdFrom*` extractors). 1 to 255 UTF-8 bytes, compared exactly.
   */
  readonly messageId: string;
  /**
   * The name of the handler that processes it, e.g. `'billing.order-created'`. Each consumer name
   * handles a message once, independently of the others. 1 to 128 UTF-8 bytes. Keep it stable:
   * renaming it makes every retained id new again.
   */
  readonly consumer: string;
}

/** What `handleOnce()` resolves to. */
export type InboxOutcome<T> =
  /** First delivery: the handler ran and its transaction committed with the id. */
  | { readonly handled: true; readonly result: T }
  /** A duplicate: the id was already recorded for this consumer; the handler did not run. */
  | { readonly handled: false };

/** The business work of one message, run in the transaction that records its id. */
export type InboxHandler<T> = (manager: EntityManager) => Promise<T>;

/** Options of `Inbox.purge()`. */
export interface InboxPurgeOptions {
  /** Rows per DELETE statement; the purge repeats until fewer are left. @default 1000 */
  batchSize?: number;
}

/** Where the inbox table lives. */
export interface InboxTableOptions {
  /** Letters, digits and underscores, at most 48 characters. @default 'inbox' */
  tableName?: string;
  /** PostgreSQL schema, or MySQL database; ignored on SQLite. @default the connection's */
  schema?: string;
}
