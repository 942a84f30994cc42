import type { OutboxRecord } from '../../message/outbox-record.interface';
import type { SqlRunner } from './sql-port';
import type { NewOutboxRow } from '../../message/new-outbox-row';
import type { MessageIdCodec } from '../rows/message-id-codec';

/**
 * A row an enqueue wrote that has a key, for its sequence number (`OutboxStore.numberKeys`):
 * numbers count per destination (topic) and key.
 */
export interface KeyedRow {
  readonly messageId: string;
  readonly topic: string;
  readonly key: string;
}

export type { NewOutboxRow };

/** What a claim returns: the rows, the lease token that settles them, and their ages. */
export interface ClaimedBatch {
  readonly token: string;
  readonly records: readonly ClaimedRecord[];
  /**
   * Keys seen during the claim with due messages queued behind an earlier undelivered message
   * of the same key that is not in flight (failed and backing off, dead, waiting, or leased
   * longer than IN_FLIGHT_GRACE_MS ago). `park` takes those followers out of the claim's path
   * until their turn.
   */
  readonly blockedKeys: readonly string[];
  /**
   * How many keys seen during the claim had due messages held back only by their key's head in
   * flight: taken by this claim, or leased by another less than IN_FLIGHT_GRACE_MS ago (or
   * settled while the claim ran). They are not parked: that head settles soon, and a claim
   * after it takes them.
   */
  readonly inFlightKeys: number;
  /**
   * How many messages the claim would have taken but another dispatcher's claim held or took
   * while it ran (0, or left out, where claims cannot run at once). The dispatcher looks again
   * soon rather than at its next poll: they were taken, not missing.
   */
  readonly contended?: number;
}

export type ClaimedRecord = OutboxRecord & {
  /** Milliseconds since enqueue, on the database clock. */
  readonly ageMs: number;
  /**
   * The ordering lane, where it is not `key`: a re-drive copy sent to another destination
   * (rows/redrive-lane.ts). What orders, holds and promotes messages goes by `laneOf`.
   */
  readonly lane?: string;
};

/**
 * The outcome of a batch, grouped so that each group is one statement. `error` is the redacted,
 * truncated text `last_error` gets; `errorClass` the error's class. Every retry, every dead
 * letter and every release with an error (an outage) is also one row of the attempt history.
 */
export interface Settlement {
  readonly delivered: readonly string[];
  readonly retry: readonly { id: string; delayMs: number; error: string; errorClass: string }[];
  /**
   * `unpublished`: it expired before its publish (a type's `maxAgeMs`), so the claim's attempt is
   * given back: a message never published has 0 attempts.
   */
  readonly dead: readonly {
    id: string;
    error: string;
    errorClass: string;
    unpublished?: boolean;
    /**
     * Its own policy lets its key's later messages go past it (`onDeadLetter: 'skip'`): decided
     * per row, never from what its key's other rows did in the same batch.
     */
    advancesKey?: boolean;
  }[];
  /**
   * Handed back with the claim's attempt given back (outage, shutdown), due again after
   * `delayMs`; `error` (an outage's cause) replaces `last_error` when not null, and is then
   * recorded in the attempt history.
   */
  readonly release: readonly {
    id: string;
    delayMs: number;
    error: string | null;
    errorClass: string | null;
  }[];
  /**
   * Delivered rows (also in `delivered`) that an `@OnOutboxDeadLetter` fallback settled instead
   * of their dead letter: each is a `fallback` row of the attempt history (`error`: the fallback
   * and the last publish error), when delivered rows are kept and the table has schema step 8.
   */
  readonly fallback?: readonly { id: string; error: string; errorClass: string }[];
  /** Keys whose head left the queue (delivered, or dead when dead messages do not block). */
  readonly advancedKeys: readonly string[];
  /**
   * The creation times of the batch's rows, widened by a millisecond each way (a row's time is
   * read to the millisecond, stored finer): a time-partitioned table's store looks for the rows
   * only in the partitions that can hold them. Absent for an empty batch.
   */
  readonly createdRange?: { readonly from: Date; readonly to: Date };
}

export interface OutboxStats {
  readonly pending: number;
  readonly leased: number;
  readonly delivered: number;
  readonly dead: number;
  /** Age of the oldest pending message in milliseconds, or null when none is pending. */
  readonly oldestPendingAgeMs: number | null;
}

export interface ClaimOptions {
  readonly limit: number;
  readonly owner: string;
  readonly leaseMs: number;
  /**
   * The dispatcher's last claim leased less than a full batch, or found the rows it would take
   * held by other claims or batches and this one looks again: it will likely find little. A
   * store whose claims take turns lets such a claim run beside the others, so that it never
   * holds up a claim about to lease a full batch (PostgreSQL).
   */
  readonly likelyFew?: boolean;
  /**
   * At most how many due rows (in due order) the claim reads to find its batch: room beyond the
   * batch for the followers of keys in flight or stuck, behind which other keys' heads wait.
   * The dispatcher passes the batch and a margin after a claim that held none of its window
   * back, and the wider window after one that did (`claimWindowAfter`); a store reads the wider
   * one (`claimWindow`) when it is absent, and never fewer rows than the batch.
   */
  readonly window?: number;
  /**
   * Called once the claim's statement has gone to the database, before its answer. The
   * dispatcher holds the previous batch's publish until then: its synchronous encoding would
   * otherwise run first and keep the claim from being sent. A store that does not call it
   * leaves that publish to start when the claim answers or the dispatcher's short bound on the
   * hold (5 ms) passes, whichever is first.
   */
  readonly onSent?: () => void;
  /**
   * The lease token to write, made by the caller so that it can give the claim back
   * (`releaseClaim`) when the answer never reaches it. @default a new one
   */
  readonly token?: string;
  /**
   * A tenant-fair claim's share (docs/tenants.md): only rows of this tenant (`id`), or without
   * one (`id` null), are taken; the heads of their keys are found as in any claim. Left out:
   * every tenant's rows.
   */
  readonly tenant?: { readonly id: string | null };
}

/** What `claimIds` leases: rows the database's log named, by id (log tailing). */
export interface ClaimIdsOptions {
  /** Row ids (`id`, decimal text), in the order the log gave them. */
  readonly ids: readonly string[];
  readonly owner: string;
  readonly leaseMs: number;
  /** The lease token to write. @default a new one */
  readonly token?: string;
}

/** A lease by id: the leased rows, and the ids the table does not show (yet). */
export interface ClaimedIds {
  readonly token: string;
  readonly records: readonly ClaimedRecord[];
  /**
   * Ids the statement's snapshot did not find at all: the log can hand over a commit a moment
   * before a new snapshot sees it. Ask again; never treat them as gone.
   */
  readonly unseen: readonly string[];
  /**
   * How long until the first row that held one of `ids` back for not being due yet (a delayed
   * message, a retry backing off: the row itself, or the head of its key) becomes due, in ms on
   * the database clock; absent when none. The table's path should look then, rather than at its
   * next poll.
   */
  readonly notDueForMs?: number;
}

/** How a store queues the messages of one key; fixed for the store's life. */
export interface OutboxQueuePolicy {
  /** A key is claimed from its head only (a run of up to `maxRun`); the others wait their turn. */
  readonly ordered: boolean;
  /** A dead message blocks the later messages of its key. */
  readonly deadBlocksKey: boolean;
  /**
   * Event types whose dead messages do the opposite of `deadBlocksKey` (their policy's
   * `onDeadLetter` differs from the module's), sorted; each checked at bootstrap to hold only
   * characters a SQL string literal needs no escape for. Empty or absent: every dead message
   * follows `deadBlocksKey`, and the statements are those without per-type policies.
   */
  readonly deadLetterExceptions?: readonly string[];
  /**
   * Under ordering, the most consecutive messages of one key a claim may lease together (a
   * run): the key's head and the messages right behind it, published one after another. 1:
   * only the head.
   */
  readonly maxRun: number;
  /** The dispatcher's claim size (`dispatcher.batchSize`): how much a promotion prepares. */
  readonly batchSize: number;
}

/**
 * The event types a purge is limited to: one type (its policy's retention), or every type but
 * these. Type names hold only the characters a policy's type may (resolve-event-policies.ts).
 */
export type PurgeTypes = { readonly only: string } | { readonly except: readonly string[] };

/** What `requeueDead` did. */
export interface RequeueReport {
  /** Messages put back in place, as the head of their key. */
  readonly requeued: number;
  /**
   * Messages moved to the end of their key's queue because later messages of the key had
   * already moved past them (dead messages that did not block their key).
   */
  readonly resequenced: number;
}

/**
 * What enqueue writes through (the service, and the admin's re-drive, which enqueues copies):
 * rows into the caller's transaction, their key sequence numbers, the wake-up after commit.
 */
export interface OutboxEnqueuePort {
  /**
   * Writes rows in the caller's transaction; with `lockKeys`, serialises writers per key first.
   * Resolves to the message ids of `idempotent` rows that were already in the table (not written).
   */
  insert(
    tx: SqlRunner,
    rows: readonly NewOutboxRow[],
    lockKeys: boolean,
  ): Promise<readonly string[]>;
  /**
   * Gives each of `rows` (keyed rows `insert` just wrote in this same transaction, in the order
   * written) the next sequence number of its topic and key, in its `key_seq` column and its
   * `x-outbox-sequence` header (`ordering.sequence`, shared-sql/key-sequence.ts). Numbers commit
   * or roll back with the transaction.
   */
  numberKeys(tx: SqlRunner, rows: readonly KeyedRow[]): Promise<void>;
  /**
   * Tells the LISTENing dispatchers (PostgreSQL NOTIFY) that a transaction which enqueued has
   * committed; called after that commit. Present only when the enqueue does not send the wake-up
   * inside the transaction itself (a connection that reports its commits). Coalesced: a burst of
   * commits costs a NOTIFY or two, the last one sent after the last commit.
   */
  wakeListeners?(): void;
}

/**
 * How far one takeover look goes (OwnerLiveness): `probe`, only the owners seen holding their
 * lock at the last list, each tried by its lock (no read of the server's lock table); `list`,
 * those, after reading which owners hold a lock now; `full`, every owner with a lease in the
 * table too.
 */
export type TakeoverLook = 'probe' | 'list' | 'full';

/**
 * What the delivery sources and their pipeline call: claims (by window, by id, by tenant),
 * the park of stuck keys, settle and lease renewal, fast takeover's owner locks, wake-ups and
 * partitioned delivery.
 */
export interface OutboxDeliveryPort {
  /**
   * Leases up to `limit` due head-of-key messages and counts an attempt for each; under
   * ordering, a head may bring the messages of its key right behind it (a run of up to
   * `policy.maxRun`, in queue order, with no gap: every earlier message of the key is in the
   * batch or delivered). Looks at a bounded window of due rows, so its cost does not grow with
   * backlogs queued behind a stuck key: those are reported in `blockedKeys` for `park`.
   */
  claim(options: ClaimOptions): Promise<ClaimedBatch>;
  /**
   * Leases, by id, those of `ids` a claim could take now (pending, due, unleased) and, under
   * ordering, only where every earlier undelivered message of the key is leased by this same
   * call: a prefix of each key's queue, as `claim` would take. The same lease, token and
   * attempt as `claim`, in one statement, so `settle` applies unchanged. Rows it leaves are
   * the table's to claim (log tailing, docs/log-tailing.md). Left out: no log tailing.
   */
  claimIds?(options: ClaimIdsOptions): Promise<ClaimedIds>;
  /**
   * Up to `limit` tenants with a due message, in tenant order after `after` (null: from the
   * first), found without reading any tenant's backlog; null stands for messages without a
   * tenant, listed last when any is due. Left out: no tenant-fair claims (docs/tenants.md).
   */
  dueTenants?(after: string | null, limit: number): Promise<readonly (string | null)[]>;
  /**
   * Whether any message is due (pending and available now), in one read of the pending index
   * outside any transaction: a drain that finds none skips the claim's transaction, so an idle
   * dispatcher's poll costs one statement. Left out: every drain claims.
   */
  hasDue?(): Promise<boolean>;
  /** Marks the due followers of these keys `waiting`; returns how many. */
  park(keys: readonly string[]): Promise<number>;
  /**
   * Applies a batch outcome; only rows still holding `token` change, then promotes the next
   * waiting messages of each advanced key (`promotionRun` of them). Atomic. Returns rows changed.
   */
  settle(token: string, settlement: Settlement, deleteDelivered: boolean): Promise<number>;
  /**
   * Lease renewal: moves the lease of the rows `ids` that still hold `token` and are pending to
   * `leaseMs` from now, on the database clock, in one statement. Returns how many rows it
   * renewed: fewer than `ids` means the others left the lease (taken over after it expired,
   * released, settled). With `newToken`, the renewed rows take that token in the same statement:
   * the lease of a batch whose publish did not answer the shutdown's abort moves to a token that
   * names no owner lock, so that no takeover shortens it. Left out: leases are never renewed.
   */
  renewLease?(
    ids: readonly string[],
    token: string,
    leaseMs: number,
    newToken?: string,
  ): Promise<number>;
  /**
   * Gives back, unpublished, the rows a claim leased with `token` whose answer was lost (the
   * database committed it, the connection failed before the caller read it): lease cleared and
   * attempt given back, as a release would. Rows that left the lease (settled, released, or
   * retaken after it expired) are not touched; a claim that never committed changes nothing.
   * Returns how many.
   */
  releaseClaim(token: string): Promise<number>;
  /**
   * Fast takeover after a crash (ARCHITECTURE.md, "Takeover after a crash"): takes the owner
   * lock of `key` on `session`, a connection the dispatcher holds for its life; false when
   * another session holds it. While it holds the lock the dispatcher writes owner lease tokens
   * (shared-sql/owner-leases.ts). Left out, with `shortenOrphanedLeases`: no fast takeover.
   */
  lockOwner?(session: SqlRunner, key: number): Promise<boolean>;
  /**
   * Gives up every owner lock `session` holds, before the connection goes back to its pool.
   * Present wherever `lockOwner` is.
   */
  unlockOwner?(session: SqlRunner): Promise<void>;
  /**
   * Takes the table's `'leases'` mode lock, shared, on the owner-lock `session` (given up with
   * the owner lock), unless dispatchers of the `'partitions'` mode deliver from the table: then
   * nothing is kept, and the answer names them. Left out where the database has no
   * `'partitions'` mode.
   */
  enterLeasesMode?(session: SqlRunner): Promise<readonly string[]>;
  /**
   * Ends `graceMs` from now (on the database clock) the owner leases whose owner lock no
   * session holds any more: their process ended, or lost the session it held the lock on and
   * stops publishing before the grace ends. Returns how many leases it shortened. `look` says
   * how far to look, where the database tells them apart (`TakeoverLook`).
   */
  shortenOrphanedLeases?(graceMs: number, look: TakeoverLook): Promise<number>;
  /**
   * Wake-ups from other processes (PostgreSQL LISTEN): `onWake` for rows committed, `onMembers`
   * for a change of the delivery partitions' shares (`OutboxDeliveryPartitionsPort.announce`).
   * Resolves to an unsubscribe function.
   */
  listen?(onWake: () => void, onMembers?: () => void): Promise<() => Promise<void>>;
  /**
   * Partitioned delivery (`dispatcher.claims: 'partitions'`, schema step 9); absent where the
   * database does not support it yet.
   */
  readonly deliveryPartitions?: OutboxDeliveryPartitionsPort;
}

/** What the workers call (unlocker, cleaner, partition maintainer): the table's upkeep. */
export interface OutboxUpkeepPort {
  /** Clears expired leases; returns how many. */
  releaseExpired(): Promise<number>;
  /**
   * Promotes waiting messages that no longer have an earlier undelivered message of their key
   * (a safety net, e.g. after `ordering.onDeadLetter` changed); returns how many.
   */
  promoteOrphans(limit: number): Promise<number>;
  /**
   * Deletes up to `limit` rows of `status` older than `olderThanMs`, first copying them into the
   * archive table in the same transaction when `archive`; returns how many.
   */
  purge(
    status: 'delivered' | 'dead',
    olderThanMs: number,
    limit: number,
    archive?: boolean,
    /** Only rows of one event type, or none of these (types with a retention of their own). */
    types?: PurgeTypes,
  ): Promise<number>;
  /**
   * Deletes up to `limit` of the oldest rows written more than `olderThanMs` ago, whatever their
   * status, with their attempt history; returns how many. For `delivery: 'external'`, where an
   * engine reading the log delivers and no row is ever marked delivered.
   */
  purgeByAge(olderThanMs: number, limit: number): Promise<number>;
}

/** What the admin calls beside its own SQL: dead letters, counts, how message ids bind. */
export interface OutboxAdminPort {
  /** Deletes the dead messages with these message ids (their keys move on); returns how many. */
  deleteDead(messageIds: readonly string[]): Promise<number>;
  /**
   * Puts dead messages back in the queue with attempts reset: those with these message ids,
   * or all. A message whose key has since moved on goes to the end of its key's queue.
   */
  requeueDead(messageIds?: readonly string[]): Promise<RequeueReport>;
  /**
   * Which of these message ids are dead of their expiry (a retry refuses them), read on the
   * store's own connection: where the app's transaction holds the database's one connection
   * (SQLite through an ORM's pool), the admin's port would wait for it. Absent: the admin reads
   * through its port.
   */
  expiredDead?(messageIds: readonly string[]): Promise<readonly string[]>;
  stats(): Promise<OutboxStats>;
  /**
   * How the table binds message ids, where it stores them otherwise than as text (MySQL/MariaDB
   * BINARY(16)); the admin API binds its lookups with it. Left out: as text.
   */
  messageIdCodec?(): Promise<MessageIdCodec>;
  /** The partitions' holders, for the admin views (`OutboxDeliveryPort.partitions`). */
  readonly deliveryPartitions?: Pick<OutboxDeliveryPartitionsPort, 'owners'>;
}

/**
 * The outbox's operations on its table. One implementation per database
 * (`lib/store/<database>/<database>.store.ts`), each on top of the SQL port (`sql-port.ts`), so
 * it runs under any ORM that implements the port. Every statement is parameterised and uses the
 * database clock for leases.
 *
 * Each of its clients is typed against its own face only: the service and the re-drive
 * against {@link OutboxEnqueuePort}, the delivery sources and pipeline against
 * {@link OutboxDeliveryPort}, the workers against {@link OutboxUpkeepPort}, the admin against
 * {@link OutboxAdminPort}. The whole is for whoever builds and closes it.
 */
export interface OutboxStore
  extends OutboxEnqueuePort, OutboxDeliveryPort, OutboxUpkeepPort, OutboxAdminPort {
  /** Declared again: delivery's whole partition store, of which the admin reads `owners`. */
  readonly deliveryPartitions?: OutboxDeliveryPartitionsPort;
  /** Ends the store's own connections (the listener, the owner lock sessions); its owner calls it. */
  close(): Promise<void>;
}

/** A partition held by this instance, and the fencing generation it holds it at. */
export type PartitionFence = ReadonlyMap<number, string>;

/** A dispatcher process delivering by partitions. */
export interface PartitionMember {
  /**
   * The process's own id (its `instanceId` and a random part made at its start): ownership
   * belongs to a process, whatever label it was given.
   */
  readonly id: string;
  /** The `instanceId` it was given. */
  readonly label: string;
  /** How long each of its heartbeats holds (its `partitionTimeoutMs`): what takers honour. */
  readonly validMs: number;
  /**
   * The key of the owner lock its session holds now (see `endGoneMembers`), or null: then only
   * its heartbeat says it lives.
   */
  readonly lockKey?: number | null;
}

/** A process whose heartbeat ends soon (`endGoneMembers`). */
export interface EndingMember {
  /** Its `instanceId`. */
  readonly label: string;
  /** Whether this call ended it (its owner lock was found free); else it ends anyway. */
  readonly cut: boolean;
  /** How long until its heartbeat ends, on the database's clock. */
  readonly endsInMs: number;
}

/** What one heartbeat answers. */
export interface PartitionBeat {
  /** Whether this process delivers: false while a dispatcher of the `'leases'` mode works. */
  readonly working: boolean;
  /** The other processes delivering by partitions, live by their own promise, by id. */
  readonly live: readonly string[];
  /** Whether another live process was given this one's `instanceId`. */
  readonly labelShared: boolean;
  /** What the owners table says this process owns now, with the generations. */
  readonly owned: PartitionFence;
}

/** What a partition owner's settle changed. */
export interface OwnedSettle {
  /** Rows of the batch settled (fewer than asked: a partition moved on). */
  readonly changed: number;
  /** Rows parked behind the keys it moved on, pending again (below the owner's read floor). */
  readonly promoted: number;
}

/** A partition taken: its generation, and its owner before (null when free). */
export interface TakenPartition {
  readonly generation: string;
  readonly previous: string | null;
}

/** One holder of delivery partitions, as the admin views show it. */
export interface OutboxPartitionOwner {
  /** The dispatcher process's id; null for the partitions no one holds. */
  readonly owner: string | null;
  /** Its `instanceId` (several processes may share one); null for the partitions no one holds. */
  readonly label: string | null;
  readonly partitions: number;
  /** Milliseconds since its last heartbeat (database clock); null when it has none. */
  readonly heartbeatAgeMs: number | null;
  /** Whether that heartbeat still holds, by the owner's own `partitionTimeoutMs`. */
  readonly live: boolean;
}

/** One read of an owner's partitions: due rows in id order, nothing written. */
export interface OwnedRead {
  /** Due pending rows of the partitions read, in id order, at most the limit. */
  readonly records: readonly ClaimedRecord[];
  /** Each record's partition, by its id. */
  readonly partitions: ReadonlyMap<string, number>;
  /**
   * Each keyed record's latest earlier row of its key that still holds it back (pending in any
   * state, waiting, or dead where dead messages block the key), by its id; absent when none.
   */
  readonly previous: ReadonlyMap<string, string>;
  /**
   * The read's snapshot: transaction ids below `xmin` had ended; `xid` is one given out after
   * it was taken (the read's own), above every transaction id given out before. Once a later
   * read's `xmin` reaches this `xid`, no row this read could not see yet below the ids it saw
   * can still commit (for rows whose transaction had its id before the row took its own, as the
   * library's enqueue makes sure). A store without transaction ids answers 0 for both: each read
   * counts as ended at once, and its reads must be told of late commits otherwise (a log).
   */
  readonly snapshot: { readonly xmin: bigint; readonly xid: bigint };
}

/** What a read of owned partitions reads past: after an id, without some ids and keys. */
export interface OwnedReadRange {
  /** Reads rows with a larger id only ('0' for every row). */
  readonly after: string;
  /** Ids held in memory already (in flight or queued). */
  readonly ids: readonly string[];
  /** Keys known to be held back by a row not yet due. */
  readonly keys: readonly string[];
}

/**
 * Partitioned delivery's use of the database (schema step 9): the dispatchers' heartbeats, the
 * partitions' owners with their fencing generations, the read that takes no lease and the
 * settle fenced by those generations.
 */
export interface OutboxDeliveryPartitionsPort {
  /**
   * Promotes up to `limit` waiting rows that nothing holds back any more (their key's head was
   * removed otherwise than by a settle, or `ordering.onDeadLetter` changed): the unlocker's
   * safety net, run by the partition owners in this mode, which starts no unlocker.
   */
  promoteOrphans(limit: number): Promise<number>;
  /**
   * Refreshes the planner's statistics of the table (ANALYZE), after an owner parked many rows:
   * until autovacuum gets to it, the statistics of a bulk insert count those rows pending and
   * of one key, and the owner's read is planned as a walk of the whole table (bench P9P).
   */
  refreshStatistics(): Promise<void>;
  /**
   * Joins (or beats, when in already) on the database clock, promising its heartbeat holds
   * `member.validMs`; delivers (`working`) if `stayWorking` (it delivered until now without a
   * lapse) or if no dispatcher of the `'leases'` mode works the table.
   */
  beat(member: PartitionMember, stayWorking: boolean): Promise<PartitionBeat>;
  /**
   * Takes each of `partitions` that is free, its own, or owned by a process whose heartbeat is
   * older than that process's own promise, raising its generation (kept when it was its own);
   * answers those taken with their generations and previous owners.
   */
  take(id: string, partitions: readonly number[]): Promise<ReadonlyMap<number, TakenPartition>>;
  /** Gives partitions up (a handover); their generations stay. */
  release(id: string, partitions: readonly number[]): Promise<void>;
  /** Who holds the partitions: each owner (null for none), its share and its heartbeat. */
  owners(): Promise<readonly OutboxPartitionOwner[]>;
  /** Who holds the table's `'leases'` mode lock now (sessions, for a log line). */
  leasesModeHolders(): Promise<readonly string[]>;
  /**
   * Leases `ids` (still pending, in partitions held at the generations of `fence`) with `token`
   * for `leaseMs`, as a claim would: a publish call deaf to the shutdown's abort may still write
   * them after this process lets its partitions go, and the next owner's reads pass leased rows
   * over. Answers how many rows it leased.
   */
  holdOwned(
    id: string,
    fence: PartitionFence,
    ids: readonly string[],
    leaseMs: number,
    token: string,
  ): Promise<number>;
  /** Leaves: gives up every partition and removes the heartbeat. */
  leave(instance: string): Promise<void>;
  /**
   * Tells the table's other processes that the shares changed (this one joined, handed
   * partitions over or left), so that they beat now rather than at their next beat: their
   * `OutboxStore.listen` hears it. Absent: they learn of it at their next beat.
   */
  announce?(): Promise<void>;
  /**
   * Ends, `graceMs` from now, the heartbeat of every other live process whose owner lock (the
   * `lockKey` of its last beat) no session holds any more: its partitions are free then, long
   * before its own timeout (takeover after a crash); its `lockKey` is cleared. Answers those, and
   * the other live processes whose heartbeat ends within `graceMs` anyway (another's look ended
   * it, or it missed two beats), never one that beats on time. Absent:
   * processes are judged by their heartbeats alone.
   */
  endGoneMembers?(id: string, graceMs: number): Promise<readonly EndingMember[]>;
  /**
   * Reads the due pending rows of `partitions` after `range.after`, in id order, at most
   * `limit`, without the ids and keys `range` names: no lock, no write.
   */
  readOwned(
    partitions: readonly number[],
    limit: number,
    range: OwnedReadRange,
  ): Promise<OwnedRead>;
  /**
   * Settles rows read by `readOwned` while this process holds their partitions at the
   * generations of `fence`; a row whose partition moved on is left as it is, and so is one this
   * settle (`token`) changed already (the same settle sent again after its answer was lost).
   * Rows parked behind the keys it moved on (delivered, or dead under `'skip'`) become pending
   * again. Answers how many rows were settled and how many were given back so.
   */
  settleOwned(
    id: string,
    fence: PartitionFence,
    settlement: Settlement,
    deleteDelivered: boolean,
    token: string,
  ): Promise<OwnedSettle>;
}
