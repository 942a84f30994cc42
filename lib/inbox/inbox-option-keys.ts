import type { KnownOptionKeys } from '../internal/did-you-mean';
import { refuseUnknownCallOptions } from '../internal/known-keys';
import type {
  InboxEntry,
  InboxGapRepairOptions,
  InboxOptions,
  InboxPurgeOptions,
  InboxSequenceOptions,
  InboxTableOptions,
} from './inbox.interfaces';
import type { InboxModuleExtras, InboxModuleOptions } from './inbox.options';

// The keys of each options object the inbox takes, declared with `satisfies` so that the build
// fails when an options interface gains a key these lists lack. A key not listed is refused
// with `OutboxOptionsError` before anything is done: `new Inbox(ds, { table: 'billing_inbox' })`
// would otherwise record ids in the default table `inbox`, and `{ sequence: { onGAP: 'hold' } }`
// run without the guard it believes it asked for.

const TABLE = { tableName: true, schema: true } satisfies Record<keyof InboxTableOptions, true>;

const GUARD = {
  sequence: {
    onGap: true,
    holdMs: true,
    repair: true,
  } satisfies Record<keyof InboxSequenceOptions, true>,
  'sequence.repair': {
    client: true,
    topic: true,
    afterMs: true,
    retryMs: true,
    maxSequences: true,
    fromFirst: true,
    onAnswer: true,
    onError: true,
  } satisfies Record<keyof InboxGapRepairOptions, true>,
};

const INBOX = {
  '': { ...TABLE, sequence: true } satisfies Record<keyof InboxOptions, true>,
  ...GUARD,
} as const satisfies KnownOptionKeys;

const MODULE = {
  '': {
    ...INBOX[''],
    dataSource: true,
    connection: true,
  } satisfies Record<keyof InboxModuleOptions, true>,
  ...GUARD,
} as const satisfies KnownOptionKeys;

const MODULE_WITH_EXTRAS = {
  ...MODULE,
  '': { ...MODULE[''], isGlobal: true } satisfies Record<
    keyof (InboxModuleOptions & InboxModuleExtras),
    true
  >,
} as const satisfies KnownOptionKeys;

const PURGE = { '': { batchSize: true } satisfies Record<keyof InboxPurgeOptions, true> };

// Read for every message received: built once here, never per call.
const ENTRY_KEYS = {
  messageId: true,
  consumer: true,
  sequence: true,
} as const satisfies Record<keyof InboxEntry, true>;

const ENTRY = { '': ENTRY_KEYS } as const satisfies KnownOptionKeys;

/** The table options of `ensureInboxTable()`, `createInboxTable()`, `inboxTableDdl()` … */
export function refuseUnknownInboxTableOptions(subject: string, options: unknown): void {
  refuseUnknownCallOptions(subject, options, { '': TABLE });
}

/** `new Inbox(source, options)`'s and `new InboxService(…)`'s options. */
export function refuseUnknownInboxOptions(options: unknown): void {
  refuseUnknownCallOptions('new Inbox()', options, INBOX);
}

/**
 * `InboxModule.forRoot(options)` (which takes the extra `isGlobal` too) or what the factory of
 * `forRootAsync` returns (`isGlobal` goes beside the factory, not in its result).
 */
export function refuseUnknownInboxModuleOptions(
  subject: 'InboxModule.forRoot()' | 'InboxModule.forRootAsync() factory',
  options: unknown,
): void {
  refuseUnknownCallOptions(
    subject,
    options,
    subject === 'InboxModule.forRoot()' ? MODULE_WITH_EXTRAS : MODULE,
  );
}

/** `Inbox.purge(olderThanMs, options)`'s options. */
export function refuseUnknownPurgeOptions(options: unknown): void {
  refuseUnknownCallOptions('Inbox.purge()', options, PURGE);
}

/**
 * The entry of `Inbox.handleOnce()` and `Inbox.recordOnce()`, before its fields are read: a
 * misspelt `messageID` would otherwise be refused as a missing `messageId`, an
 * `InvalidInboxEntryError` that `isPermanentInboxError` counts as the message's own fault, and
 * every message would be rejected; `OutboxOptionsError` says it is the caller's. This runs for
 * every message, so the common case is a loop over the entry's keys against the module-level
 * list, which allocates nothing: the shared check, which names the key, the one it likely
 * meant and the accepted ones, runs only once a key is not listed.
 */
export function refuseUnknownEntryKeys(
  method: 'Inbox.handleOnce()' | 'Inbox.recordOnce()',
  entry: unknown,
): void {
  if (entry === null || typeof entry !== 'object') return;
  for (const key in entry) {
    // `for…in` sees inherited keys too; the shared check, like every other, reads own keys.
    if (!Object.hasOwn(ENTRY_KEYS, key) && Object.hasOwn(entry, key)) {
      refuseUnknownCallOptions(`${method} entry`, entry, ENTRY);
    }
  }
}
