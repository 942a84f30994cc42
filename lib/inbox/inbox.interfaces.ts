import type { EntityManager } from 'typeorm';
import type {
  GapRepairAnswer,
  GapRepairClient,
  GapRepairRequest,
} from '../module/admin/gap-repair.interfaces';
import type { SequenceCheck, SequencedMessage, SequenceOptions } from './sequence.interfaces';

/**
 * Which message, for which consumer: the inbox's primary key. Any other key (a misspelt
 * `messageID`) is refused with `OutboxOptionsError` before anything is read or written.
 */
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
  /**
   * The message's key and number (`sequenceOf(headers)` reads `x-outbox-key` and
   * `x-outbox-sequence`), for the gap guard; null or left out: no guard for this message.
   */
  readonly sequence?: SequencedMessage | null;
}

/** What `handleOnce()` resolves to. */
export type InboxOutcome<T> =
  /** First delivery: the handler ran and its transaction committed with the id. */
  | {
      readonly handled: true;
      readonly result: T;
      /** How the message stood in its key's sequence, when the entry carried one. */
      readonly sequence?: SequenceCheck;
    }
  /** A duplicate: the id was already recorded for this consumer; the handler did not run. */
  | { readonly handled: false };

/** The business work of one message, run in the transaction that records its id. */
export type InboxHandler<T> = (manager: EntityManager, context: InboxHandlerContext) => Promise<T>;

/** What the handler learns of its message besides the transaction. */
export interface InboxHandlerContext {
  /**
   * How the message stands in its key's sequence (`gap`: an earlier one not seen yet;
   * `out-of-order`: older than the last seen), when the entry carried one.
   */
  readonly sequence?: SequenceCheck;
}

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

/**
 * Gap repair (docs/gap-repair.md): when a held message's predecessors stay missing for `afterMs`,
 * the inbox asks the producer for them through `client`, keeps holding while they are re-sent,
 * and stops waiting for numbers the producer answers as gone or dead.
 */
export interface InboxGapRepairOptions {
  /** How to reach the producer: `httpGapRepairClient({ url })`, or your own transport. */
  readonly client: GapRepairClient;
  /** The topic the consumer reads (the producer numbers per topic and key), or one per consumer name. */
  readonly topic: string | ((consumer: string) => string);
  /**
   * How long a gap must last before the inbox asks, in ms: a predecessor merely handled at the
   * same time (another delivery in flight) closes it first, so nothing is asked when nothing
   * was lost. With `onGap: 'reject'`, the message waits this long before it is refused.
   * @default 250
   */
  readonly afterMs?: number;
  /** How long to wait before asking again for numbers still missing, in ms. @default 1000 */
  readonly retryMs?: number;
  /** The most numbers one request asks for (the lowest first). @default 100 */
  readonly maxSequences?: number;
  /**
   * Also ask when the key was never seen here (its first number is above 1). Off by default: a
   * consumer started on keys with a history would ask for all of it. @default false
   */
  readonly fromFirst?: boolean;
  /** Told each answer (for logs and metrics). */
  readonly onAnswer?: (request: GapRepairRequest, answer: GapRepairAnswer) => void;
  /** Told each request that got no answer; the inbox asks again after `retryMs`. */
  readonly onError?: (request: GapRepairRequest, error: unknown) => void;
}

/** The inbox's gap guard: `SequenceOptions` and, with `onGap` 'hold' or 'reject', `repair`. */
export interface InboxSequenceOptions extends SequenceOptions {
  /** Ask the producer for missing messages (docs/gap-repair.md). @default off */
  repair?: InboxGapRepairOptions;
}

/** Options of `new Inbox()`: where the table is, and the gap guard. */
export interface InboxOptions extends InboxTableOptions {
  /**
   * What the gap guard does with a message whose entry carries a sequence and arrives before an
   * earlier one of its key. @default { onGap: 'accept', holdMs: 5000 }
   */
  sequence?: InboxSequenceOptions;
}
