import type { OutboxBrokerAttributes, OutboxHeaders } from '../../message/outbox-message.interface';

/** The states of an outbox row (`waiting`: parked behind an earlier message of its key). */
export type OutboxMessageStatus = 'pending' | 'waiting' | 'delivered' | 'dead';

/**
 * Which messages an admin call looks at. Every given field must match; an empty filter matches
 * every message. Ages are measured on the database clock.
 */
export interface OutboxMessageFilter {
  /** One status or several. @default any */
  readonly status?: OutboxMessageStatus | readonly OutboxMessageStatus[];
  readonly topic?: string;
  /** The event type (`event_type`). */
  readonly type?: string;
  /** The message key; `null` matches messages without a key. */
  readonly key?: string | null;
  /** A substring of `last_error`, case-insensitive (ASCII letters only on SQLite). */
  readonly errorContains?: string;
  /** Enqueued strictly before this instant. */
  readonly createdBefore?: Date;
  /** Enqueued at or after this instant. */
  readonly createdAfter?: Date;
  /** Enqueued more than this many milliseconds ago. */
  readonly olderThanMs?: number;
  /**
   * The message's tenant (`tenant_id`, docs/tenants.md); `null` matches messages without one.
   * Only with the `tenants` option on.
   */
  readonly tenant?: string | null;
}

/** A filter over dead letters: the status is `dead` by definition. */
export type OutboxDeadLetterFilter = Omit<OutboxMessageFilter, 'status'>;

/**
 * What a retry or purge by filter acts on: the dead letters matching a filter that names at
 * least one field, or every dead letter, said explicitly with `{ all: true }`.
 */
export type OutboxDeadLetterSelection = OutboxDeadLetterFilter | { readonly all: true };

/** One page of a keyset-paginated listing. */
/**
 * What `OutboxAdmin.retry` and `retryWhere` did: the store's report, and the dead messages they
 * refused because they died of their type's expiry (`maxAgeMs`). Such a message is already past
 * its expiry: requeued, its next claim would dead-letter it again unpublished (holding its key
 * again under `'block'`, running its fallback again). Purge it; to send its content anyway,
 * enqueue it again as a new message.
 */
export interface OutboxRetryReport {
  /** Messages put back in place, as the head of their key. */
  readonly requeued: number;
  /** Messages moved to the end of their key's queue (see `RequeueReport`). */
  readonly resequenced: number;
  /** Message ids refused because they expired (left dead), in queue order. */
  readonly expired: readonly string[];
}

export interface OutboxPageRequest {
  /** The `nextCursor` of the previous page; omit it for the first page. */
  readonly after?: string | null;
  /** Items per page, 1 to 1000. @default 100 */
  readonly limit?: number;
}

export interface OutboxPage<T> {
  readonly items: readonly T[];
  /** Pass as `after` to get the next page; `null` on the last page. */
  readonly nextCursor: string | null;
}

/** A message as listed: everything but its payload, headers and lease token. */
export interface OutboxMessageSummary {
  /** Row id: the queue order, and the listing cursor. */
  readonly id: string;
  readonly messageId: string;
  readonly topic: string;
  readonly key: string | null;
  readonly type: string;
  readonly status: OutboxMessageStatus;
  /** Publish attempts started (counted at claim). */
  readonly attempts: number;
  /** The last failure or outage, truncated and redacted. */
  readonly lastError: string | null;
  /** When a dispatcher last claimed the message. */
  readonly lastAttemptAt: Date | null;
  /** When the message is next due (while leased: the lease end). */
  readonly availableAt: Date;
  readonly createdAt: Date;
  readonly deliveredAt: Date | null;
  readonly deadAt: Date | null;
  /** The dispatcher instance holding (or that last held) the lease. */
  readonly lockedBy: string | null;
  readonly lockedUntil: Date | null;
  /** Milliseconds since enqueue, on the database clock. */
  readonly ageMs: number;
  /** The message's tenant, with the `tenants` option on (null: none); absent otherwise. */
  readonly tenant?: string | null;
}

/**
 * What became of a failed attempt: `retry` (tried again after a backoff), `dead`
 * (dead-lettered), `outage` (the broker was unreachable: released unpublished, the attempt
 * given back), or `fallback` (its `@OnOutboxDeadLetter` fallback settled it instead of its dead
 * letter; the error names the fallback and the last publish error; schema step 8).
 */
export type OutboxAttemptOutcome = 'retry' | 'dead' | 'outage' | 'fallback';

/** One failed publish attempt of a message, as the attempt history `<table>_attempts` keeps it. */
export interface OutboxAttempt {
  /**
   * The attempt's number, as counted at claim (an outage's attempt is given back, so the next
   * attempt has the same number). Counting starts over when a dead message is retried.
   */
  readonly attempt: number;
  readonly outcome: OutboxAttemptOutcome;
  /** When the failure was recorded (database clock). */
  readonly failedAt: Date;
  /** The dispatcher instance that made the attempt (its lease owner). */
  readonly lockedBy: string | null;
  /** The error's class (`name`), e.g. `PublishTimeoutError`. */
  readonly errorClass: string | null;
  /** The error text, redacted and truncated like `lastError`. */
  readonly error: string | null;
}

/** A message in full, as `OutboxAdmin.get()` returns it. */
export interface OutboxMessageDetail extends OutboxMessageSummary {
  /**
   * The payload exactly as enqueued (JSON text); `null` for a binary message, whose bytes are
   * `payloadBytes`.
   */
  readonly payload: string;
  /** `'binary'` for a message enqueued as bytes with a content type, else `'json'`. */
  readonly encoding: 'json' | 'binary';
  /** The content type of a binary message; null for JSON. */
  readonly contentType: string | null;
  /** The bytes of a binary message; null for JSON. */
  readonly payloadBytes: Buffer | null;
  /** The broker attributes given at enqueue, or null. */
  readonly attributes: OutboxBrokerAttributes | null;
  readonly headers: OutboxHeaders;
  readonly lockToken: string | null;
  /**
   * Its failed attempts, oldest first: the latest 50 at most. Kept across a retry of the dead
   * message, deleted with the message. Empty for a message that never failed.
   */
  readonly attemptHistory: readonly OutboxAttempt[];
  /** The policy its event type is delivered under (`'default'`: the module's options). */
  readonly policy: OutboxPolicyView;
}

/**
 * One event type's resolved policy, as the admin API shows it: its overrides merged over the
 * module's defaults (`retry.retryIf` left out: a function).
 */
export interface OutboxPolicyView {
  /** `'default'`, or the event type the policy was given for. */
  readonly name: string;
  readonly retry: {
    readonly maxAttempts: number;
    readonly initialDelayMs: number;
    readonly maxDelayMs: number;
    readonly factor: number;
    readonly jitter: number;
    readonly maxAgeMs: number;
  };
  readonly onDeadLetter: 'block' | 'skip';
  readonly deliveredRetentionMs: number;
  readonly deadRetentionMs: number | null;
  /** Message expiry (ms since enqueue); 0: none. */
  readonly maxAgeMs: number;
}

/**
 * A key whose head cannot go and holds messages back: its head is dead (with
 * `ordering.onDeadLetter: 'block'`) or backing off after a failure or an outage.
 */
export interface OutboxBlockedKey {
  readonly key: string;
  /** Row id of the head; the cursor of `blockedKeys()`. */
  readonly headId: string;
  readonly headMessageId: string;
  /** `dead`, or `retrying` for a pending head that waits for its next attempt. */
  readonly headStatus: 'dead' | 'retrying';
  readonly headAttempts: number;
  readonly lastError: string | null;
  /** When a retrying head is due again; null for a dead one. */
  readonly nextAttemptAt: Date | null;
  /** Undelivered messages of the key queued behind the head. */
  readonly waiting: number;
  /** Age of the oldest of them in milliseconds, database clock. */
  readonly oldestWaitingAgeMs: number;
}

/** A pending message whose lease expired, or that has been leased for long. */
export interface OutboxStuckLease extends OutboxMessageSummary {
  /** The lease ended and no one has cleared or taken it over yet. */
  readonly leaseExpired: boolean;
  /** Milliseconds since the claim that took the lease. */
  readonly leasedForMs: number;
}

export interface OutboxStuckLeaseQuery extends OutboxPageRequest {
  /** Also report live leases taken longer ago than this. @default only expired leases */
  readonly leasedLongerThanMs?: number;
}

/** Counts by state. `pending` excludes leased and waiting messages. */
export interface OutboxStatusCounts {
  readonly pending: number;
  readonly waiting: number;
  /** Pending messages under a live lease (being published). */
  readonly leased: number;
  readonly delivered: number;
  readonly dead: number;
}

export interface OutboxTopicCounts extends OutboxStatusCounts {
  readonly topic: string;
}

/** One topic's recent flow: what left the queue lately, and how long its oldest message waits. */
export interface OutboxTopicActivity {
  readonly topic: string;
  /** Messages delivered within the window. */
  readonly delivered: number;
  /** Messages dead-lettered within the window. */
  readonly dead: number;
  /** Age of the topic's oldest pending or parked message (database clock), or null when none. */
  readonly oldestPendingAgeMs: number | null;
}

export interface OutboxCounts extends OutboxStatusCounts {
  /** Per topic, in topic order. */
  readonly byTopic: readonly OutboxTopicCounts[];
}

/** The first undelivered message of a key, which holds the later ones back. */
export interface OutboxWhyHead {
  readonly messageId: string;
  readonly status: OutboxMessageStatus;
  readonly lastError: string | null;
}

/** What `OutboxAdmin.why()` found out about one message. */
export interface OutboxWhy {
  readonly messageId: string;
  /**
   * `unknown` (no such row), `delivered`, `dead`, `parked` (waiting behind its key's head),
   * `leased` (being published), `lease-expired`, `scheduled` (due later: backoff or delay),
   * `behind-head` (due, but an earlier message of its key goes first), `due` (the next claim
   * takes it), `external` (delivery is external: Debezium or another engine reading the log
   * delivers, and the table does not record what it delivered).
   */
  readonly state:
    | 'external'
    | 'unknown'
    | 'delivered'
    | 'dead'
    | 'parked'
    | 'leased'
    | 'lease-expired'
    | 'scheduled'
    | 'behind-head'
    | 'due';
  /** One sentence an operator can act on. */
  readonly reason: string;
  readonly message: OutboxMessageDetail | null;
  /** The head of its key that holds it back, when one does. */
  readonly head: OutboxWhyHead | null;
}

/**
 * Who delivers a table's messages under `dispatcher.claims: 'partitions'` (docs/delivery.md,
 * "Partitions"): its 256 *delivery partitions* of the key space, not the time partitions of a
 * partitioned table (`outbox partitions status`). What `OutboxAdmin.deliveryPartitions()`
 * answers, the `outbox delivery-partitions status` command prints and the console's Delivery
 * partitions page shows.
 */
export type OutboxDeliveryPartitions =
  OutboxDeliveryPartitionsInUse | OutboxDeliveryPartitionsNotInUse;

/** Delivery partitions are not in use on this table, and why. */
export interface OutboxDeliveryPartitionsNotInUse {
  readonly inUse: false;
  /**
   * `database`: only PostgreSQL has them; `schema`: the table lacks schema step 9 (or has an
   * earlier 0.3 build's); `no-dispatcher`: no dispatcher delivers this table by partitions now
   * (the `'leases'` mode, or none running).
   */
  readonly reason: 'database' | 'schema' | 'no-dispatcher';
  /** The same in one sentence an operator can act on. */
  readonly message: string;
}

/** Delivery partitions are in use: who holds them, their heartbeats, shares and moves. */
export interface OutboxDeliveryPartitionsInUse {
  readonly inUse: true;
  /** How many partitions the key space is cut into (256). */
  readonly total: number;
  /**
   * The dispatcher processes: those holding partitions, and those seen lately holding none (one
   * that joined, waits for the `'leases'` mode to leave, or stopped beating), by id.
   */
  readonly dispatchers: readonly OutboxDeliveryPartitionDispatcher[];
  /** How many partitions no one holds now (between a hand-over and the next take). */
  readonly unowned: number;
  /** Every partition with its owner and its last move, in partition order. */
  readonly partitions: readonly OutboxDeliveryPartition[];
  /**
   * Hand-overs and takeovers. The tables keep no history of moves: this is what each partition's
   * row says of its own (`generation`, `since`), summed.
   */
  readonly moves: {
    /** Times a partition was taken by a dispatcher that did not hold it, since the tables were made. */
    readonly total: number;
    /** The latest move (a take or a hand-over), database clock; null before the first. */
    readonly lastAt: Date | null;
    /**
     * Each partition's last move, those of one moment and owner together (a take or a
     * hand-over moves many at once), latest first; partitions never taken are left out.
     */
    readonly latest: readonly OutboxDeliveryPartitionMove[];
  };
}

/** Partitions whose last move was the same one: taken by an owner, or given up (no owner). */
export interface OutboxDeliveryPartitionMove {
  /** When (database clock). */
  readonly at: Date;
  /** The process that took them and holds them; null when they were given up and are free. */
  readonly owner: string | null;
  readonly partitions: number;
  /** The partitions as ranges (`0-84, 170-255`). */
  readonly ranges: string;
}

/** One dispatcher process of a table delivered by partitions. */
export interface OutboxDeliveryPartitionDispatcher {
  /** The process's id (its `instanceId` and a random part made at its start). */
  readonly id: string;
  /** The `instanceId` it was given (several processes may share one); null when unknown. */
  readonly instanceId: string | null;
  /**
   * `delivering`: its heartbeat holds and it delivers; `waiting`: its heartbeat holds, but it
   * delivers nothing while a dispatcher of the `'leases'` mode works the table; `gone`: its
   * heartbeat ran out (it stopped without leaving: a crash, a freeze, a cut connection), and
   * the others take what it holds over.
   */
  readonly state: 'delivering' | 'waiting' | 'gone';
  /** Milliseconds since its last heartbeat (database clock); null when none is recorded. */
  readonly heartbeatAgeMs: number | null;
  /** How long each of its heartbeats holds (its `partitionTimeoutMs`); null when unknown. */
  readonly validMs: number | null;
  /** When it joined (database clock); null when unknown. */
  readonly joinedAt: Date | null;
  /** How many partitions it holds. */
  readonly partitions: number;
  /** Its share of the partitions, from 0 to 1. */
  readonly share: number;
  /** The partitions it holds as ranges (`0-84, 170-255`); empty when none. */
  readonly ranges: string;
  /** When it took the latest of the partitions it holds (database clock); null when none. */
  readonly lastTakenAt: Date | null;
}

/** One delivery partition: its owner and its last move. */
export interface OutboxDeliveryPartition {
  readonly partition: number;
  /** The id of the process holding it; null when no one does. */
  readonly owner: string | null;
  /** Times it was taken by a dispatcher that did not hold it; settles are fenced by it. */
  readonly generation: number;
  /** When its owner took it, or (no owner) when it was given up; database clock. */
  readonly since: Date;
}
