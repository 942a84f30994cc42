import type { PurgeTypes, TakeoverLook } from '../ports/outbox-store.port';
import { someDeadSkip } from '../shared-sql/dead-blocking';
import { Logger } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import type {
  ClaimOptions,
  ClaimedBatch,
  ClaimIdsOptions,
  ClaimedIds,
  KeyedRow,
  NewOutboxRow,
  OutboxQueuePolicy,
  OutboxStats,
  OutboxStore,
  RequeueReport,
  Settlement,
} from '../ports/outbox-store.port';
import { describeError } from '../../internal/describe-error';
import { OutboxMessages } from '../../outbox.messages';
import { OutboxTransactionRequiredError } from '../../errors/outbox-transaction-required.error';
import {
  postgresClaim,
  postgresDeadKeys,
  postgresDeadToRequeue,
  postgresDeleteDead,
  postgresInsert,
  postgresInsertOne,
  POSTGRES_OPEN_TRANSACTION,
  postgresLockKeys,
  postgresClaimTurn,
  postgresOpening,
  postgresOrphanKeys,
  postgresHasDue,
  postgresHasWaitingIndex,
  postgresPark,
  postgresPromote,
  postgresPurge,
  postgresPurgeByAge,
  postgresReleaseAllWaiting,
  postgresReleaseClaim,
  postgresRenewLease,
  postgresReleaseExpired,
  POSTGRES_FREE_OWNERS,
  POSTGRES_LIVE_OWNERS,
  postgresLeaseOwners,
  postgresShortenOwnerLeases,
  postgresRequeueInPlace,
  postgresResequence,
  postgresSettle,
  postgresSettlementValues,
  postgresStats,
} from './postgres.sql';
import { windowOf } from '../shared-sql/claim-window';
import { ownerHex, ownerKeyOf, POSTGRES_OWNER_LOCK_CLASS } from '../shared-sql/owner-leases';
import { leasesModeLockOf } from '../shared-sql/leases-mode-lock';
import { MEMBERS_NOTICE } from '../shared-sql/delivery-partitions';
import { postgresWorkingPartitionOwners } from './postgres.delivery-partitions-sql';
import { postgresClaimIds } from './postgres.claim-ids-sql';
import { postgresLiterals } from './postgres-literal';
import { promotionRun } from '../../options/queue-policy';
import { preparedFailure, statementName } from '../shared-sql/prepared-statements';
import {
  alreadyPresent,
  hashKey,
  sortedKeyLocks,
  toClaimedRecords,
  type ClaimedRow,
} from '../rows/outbox-row.mapper';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import { extendedValues, isExtended, cachedStatement } from '../shared-sql/sql-values';
import type { SqlPort, SqlQueryOptions, SqlResult, SqlRunner } from '../ports/sql-port';
import { PostgresWakeNotifier } from './postgres-wake-notifier';
import { postgresNumberKeys } from './postgres.key-sequence-sql';
import { postgresDueTenants } from './postgres.tenant-sql';
import { PostgresDeliveryPartitionsStore } from './postgres.delivery-partitions.store';
import type { OutboxDeliveryPartitionsPort } from '../ports/outbox-store.port';

/** How an enqueue wakes the LISTENing dispatchers (see the store's constructor). */
export type PostgresWakeUp = 'none' | 'transaction' | 'after-commit';

type StatsRow = Record<'pending' | 'leased' | 'delivered' | 'dead', number> & {
  oldest_ms: string | number | null;
};

const RELISTEN_DELAY_MS = 1_000;

/** PostgreSQL: single-statement claim with SKIP LOCKED, advisory locks per key, LISTEN/NOTIFY. */
export class PostgresOutboxStore implements OutboxStore {
  private readonly logger = new Logger('OutboxStore');
  private readonly channel: string;
  /** The owner keys whose lock a session held at the last look (shortenOrphanedLeases). */
  private ownersSeen = new Set<number>();
  /** Advisory-lock namespace of enqueues: a key's writers commit in id order. */
  private readonly lockNamespace: number;
  /** Advisory-lock namespace of parking and promotion, apart so they never wait on enqueues. */
  private readonly dispatchNamespace: number;
  /** The enqueue statement of each variant, with the name it is prepared under (or none). */
  private readonly insertSql = new Map<string, { text: string; options: SqlQueryOptions }>();
  /** The numbering of `ordering.sequence`, built at its first use. */
  private numberKeysSql: string | undefined;
  /** The name each statement of the outbox's own transactions is prepared under, by its text. */
  private readonly preparedNames = new Map<string, SqlQueryOptions>();
  /** Set when the server lost one of those statements: they run as plain text from then on. */
  private dispatchUnprepared = false;
  /** The settle statement of each shape (its groups, settle mode, partition range, promotion). */
  private readonly settleSql = new Map<string, string>();
  private readonly claimSql: string;
  /** The claims of one tenant's share, and of the rows without one (tenant-fair claims). */
  private readonly tenantClaimSql: Record<'one' | 'none', string>;
  /** The lease by id of log tailing, built at its first use. */
  private claimIdsSql: string | undefined;
  /** Whether the table has schema step 5's waiting index; read once, at the first promotion. */
  private waitingIndex: Promise<boolean> | undefined;
  /** Whether the enqueue's statement sends the NOTIFY itself. */
  private readonly notify: boolean;
  /** The NOTIFY sent after commits, in 'after-commit' mode. */
  private readonly notifier: PostgresWakeNotifier | undefined;
  /** Present in 'after-commit' mode: called once a transaction that enqueued committed. */
  readonly wakeListeners?: () => void;

  constructor(
    private readonly sql: SqlPort,
    private readonly names: OutboxTableNames,
    /**
     * How the enqueue wakes the LISTENing dispatchers: a NOTIFY in its statement ('transaction'),
     * one sent after the commit (`wakeListeners`, for a connection that reports its commits), or
     * none (nothing listens: log tailing, external delivery, `listen` off).
     */
    wakeUp: PostgresWakeUp,
    private readonly policy: OutboxQueuePolicy,
    private readonly timeoutMs: number,
    /** The schema the table resolves to (the table's own, else the connection's). */
    schema: string = names.schema ?? 'public',
    /** Whether the table is time-partitioned (postgres.partition-sql.ts): ids are guarded apart. */
    private readonly partitioned = false,
    /**
     * Whether enqueues, and the statements of the outbox's own transactions (claim, settle,
     * park, promotion), run as named prepared statements (`preparedStatements`).
     */
    private readonly prepared = true,
    /** Whether the attempt history takes `fallback` rows (schema step 8). */
    private readonly fallbackHistory = false,
  ) {
    this.channel = `${schema}_${names.tableName}`.slice(0, 63);
    this.lockNamespace = hashKey(`nestjs-outbox:${this.channel}`);
    this.dispatchNamespace = hashKey(`nestjs-outbox-dispatch:${this.channel}`);
    this.claimSql = postgresClaim(names, policy, partitioned);
    this.tenantClaimSql = {
      one: postgresClaim(names, policy, partitioned, 'one'),
      none: postgresClaim(names, policy, partitioned, 'none'),
    };
    this.notify = wakeUp === 'transaction';
    if (wakeUp === 'after-commit') {
      const notifier = new PostgresWakeNotifier(sql, this.channel);
      this.notifier = notifier;
      this.wakeListeners = () => notifier.wake();
    }
  }

  async insert(
    tx: SqlRunner,
    given: readonly NewOutboxRow[],
    lockKeys: boolean,
  ): Promise<readonly string[]> {
    // The partitioned table's guard accepts an id once per statement, then writes every row
    // carrying it: a batch repeating an id keeps its first row, as UNIQUE (message_id) does.
    const rows = this.partitioned ? firstOfEachId(given) : given;
    const scheduled = rows.some((r) => r.availableAt !== null || r.delayMs !== null);
    const keys = lockKeys ? sortedKeyLocks(rows.map((r) => r.key)) : [];
    const lock = keys.length > 0;
    const idempotent = rows.some((r) => r.idempotent === true);
    const [only] = rows;
    const one = rows.length === 1 && only !== undefined;
    const extended = rows.some(isExtended);
    const variant = `${one}:${scheduled}:${lock}:${this.notify}:${idempotent}:${extended}`;
    const statement = cachedStatement(this.insertSql, variant, () => {
      const shape = [this.names, scheduled, lock, this.notify, idempotent, extended] as const;
      const write = (checked: boolean) =>
        one
          ? postgresInsertOne(...shape, this.partitioned, checked)
          : postgresInsert(...shape, this.partitioned, checked);
      const text = write(true);
      // The same insert without its transaction check, for a port that knows the connection is
      // in the caller's open transaction when it sends it: one round trip in a transaction that
      // has not written yet, instead of a refusal, `txid_current()` and the insert again.
      const unchecked = write(false);
      const inTransaction = this.prepared
        ? { text: unchecked, prepare: statementName(unchecked) }
        : { text: unchecked };
      return {
        text,
        options: this.prepared
          ? { prepare: statementName(text), inTransaction }
          : { inTransaction },
      };
    });
    // Parameters in the order the statement numbers them: the rows' columns (values for one
    // row, arrays for many), then the optional groups.
    const params: unknown[] = one
      ? [only.messageId, only.topic, only.key, only.type, only.payload, only.headers]
      : [
          rows.map((r) => r.messageId),
          rows.map((r) => r.topic),
          rows.map((r) => r.key),
          rows.map((r) => r.type),
          rows.map((r) => r.payload),
          rows.map((r) => r.headers),
        ];
    if (extended) {
      if (one) params.push(...extendedValues(only));
      else {
        const values = rows.map(extendedValues);
        for (let column = 0; column < 4; column++) params.push(values.map((v) => v[column]));
      }
    }
    if (scheduled) {
      if (one) params.push(only.availableAt, only.delayMs);
      else
        params.push(
          rows.map((r) => r.availableAt),
          rows.map((r) => r.delayMs),
        );
    }
    if (lock) params.push(this.lockNamespace, one ? keys[0] : keys);
    if (this.notify) params.push(this.channel);
    const write = (options: SqlQueryOptions) =>
      tx
        .query<{ id: unknown; open?: unknown }>(statement.text, params, options)
        .catch((error: unknown) => {
          throw statement.options.prepare === undefined
            ? error
            : preparedFailure(error, lostPreparedStatement, OutboxMessages.preparedStatementLost);
        });
    const refused = (result: SqlResult<{ id: unknown; open?: unknown }>) =>
      idempotent ? result.rows.some((r) => r.open === false) : result.affected !== rows.length;
    let result = await write(statement.options);
    if (refused(result)) {
      // A transaction that has not written yet has no id for the check to see: give it one,
      // and try once more. Refused again, the handle's transaction had ended. The retry is
      // checked whatever the port knows: the app may have begun another transaction meanwhile.
      await tx.query(POSTGRES_OPEN_TRANSACTION);
      const { inTransaction: _, ...checked } = statement.options;
      result = await write(checked);
      if (refused(result)) {
        throw new OutboxTransactionRequiredError(OutboxMessages.transactionEndedBeforeWrite());
      }
    }
    return idempotent ? alreadyPresent(rows, result.rows) : [];
  }

  async numberKeys(tx: SqlRunner, rows: readonly KeyedRow[]): Promise<void> {
    if (rows.length === 0) return;
    this.numberKeysSql ??= postgresNumberKeys(this.names);
    const text = this.numberKeysSql;
    const options = this.prepared ? { prepare: statementName(text) } : undefined;
    const { affected } = await tx
      .query(
        text,
        [rows.map((r) => r.messageId), rows.map((r) => r.topic), rows.map((r) => r.key)],
        options,
      )
      .catch((error: unknown) => {
        throw options === undefined
          ? error
          : preparedFailure(error, lostPreparedStatement, OutboxMessages.preparedStatementLost);
      });
    // Fewer rows numbered than written: the statement ran outside the transaction that wrote
    // them (it had ended), and numbered nothing.
    if (affected !== rows.length) {
      throw new OutboxTransactionRequiredError(OutboxMessages.transactionEndedBeforeWrite());
    }
  }

  async claim(options: ClaimOptions): Promise<ClaimedBatch> {
    const token = options.token ?? randomUUID();
    const params: unknown[] = [
      options.owner,
      token,
      options.leaseMs,
      options.limit,
      windowOf(options),
    ];
    if (this.policy.ordered) params.push(this.policy.maxRun);
    const tenant = options.tenant;
    if (tenant !== undefined && tenant.id !== null) params.push(tenant.id);
    const text =
      tenant === undefined
        ? this.claimSql
        : this.tenantClaimSql[tenant.id === null ? 'none' : 'one'];
    const claim = (turn: boolean) =>
      this.statementTransaction<ClaimRow>(text, params, {
        claimTurn: turn,
        onSent: options.onSent,
      });
    // A claim likely to find little (`likelyFew`) does not take a turn: it would make the claims
    // behind it wait for a few rows or none (bench P6 over 1 000 keys). A turn not given within
    // its wait (a claim whose instance froze mid-transaction holds it until the server ends
    // that transaction) is gone without: SKIP LOCKED keeps such a claim correct, only less
    // likely to find rows no other claim is taking.
    const { rows } =
      options.likelyFew === true
        ? await claim(false)
        : await claim(true).catch((error: unknown) => {
            if (lockTimedOut(error)) return claim(false);
            throw error;
          });
    const claimed = rows.filter((row): row is ClaimedRow & ClaimRow => row.id !== null);
    return {
      token,
      records: toClaimedRecords(claimed),
      blockedKeys: rows[0]?.blocked ?? [],
      inFlightKeys: rows[0]?.in_flight ?? 0,
      contended: rows[0]?.contended ?? 0,
    };
  }

  async claimIds(options: ClaimIdsOptions): Promise<ClaimedIds> {
    const token = options.token ?? randomUUID();
    if (options.ids.length === 0) return { token, records: [], unseen: [] };
    this.claimIdsSql ??= postgresClaimIds(this.names, this.policy);
    const params = [options.owner, token, options.leaseMs, options.ids];
    const { rows } = await this.statementTransaction<ClaimIdsRow>(this.claimIdsSql, params, {});
    const claimed = rows.filter((row): row is ClaimedRow & ClaimIdsRow => row.id !== null);
    const dueInMs = rows[0]?.due_in_ms ?? null;
    return {
      token,
      records: toClaimedRecords(claimed),
      unseen: rows[0]?.unseen ?? [],
      ...(dueInMs === null ? {} : { notDueForMs: Number(dueInMs) }),
    };
  }

  async dueTenants(after: string | null, limit: number): Promise<readonly (string | null)[]> {
    const { rows } = await this.run<{ tenant: string | null }>(postgresDueTenants(this.names), [
      after,
      limit,
    ]);
    return rows.map((r) => r.tenant);
  }

  private partitionStore: PostgresDeliveryPartitionsStore | undefined;

  /** Partitioned delivery's statements (schema step 9), in this store's dispatch transactions. */
  get deliveryPartitions(): OutboxDeliveryPartitionsPort {
    this.partitionStore ??= new PostgresDeliveryPartitionsStore(
      this.names,
      this.policy,
      (sql, params, lockKeys) =>
        this.statementTransaction(sql, params, lockKeys === undefined ? {} : { lockKeys }),
      (sql, params) => this.run(sql, [...params]),
      this.fallbackHistory,
      () => this.hasWaitingIndex(),
      (limit) => this.promoteOrphans(limit),
      async () => {
        await this.run('SELECT pg_notify($1::text, $2::text)', [this.channel, MEMBERS_NOTICE]);
      },
    );
    return this.partitionStore;
  }

  async hasDue(): Promise<boolean> {
    const { rows } = await this.run<{ due: boolean }>(postgresHasDue(this.names), []);
    return rows[0]?.due === true;
  }

  async park(keys: readonly string[]): Promise<number> {
    if (keys.length === 0) return 0;
    const sql = postgresPark(this.names, this.policy);
    return (await this.statementTransaction(sql, [keys], { lockKeys: keys })).affected;
  }

  async settle(token: string, s: Settlement, deleteDelivered: boolean): Promise<number> {
    // Where delivered rows are deleted, their history goes with them in this very statement.
    const fallback = this.fallbackHistory && !deleteDelivered ? (s.fallback ?? []) : [];
    const groups = {
      delivered: s.delivered.length > 0,
      retry: s.retry.length > 0,
      dead: s.dead.length > 0,
      release: s.release.length > 0,
      fallback: fallback.length > 0,
    };
    if (!groups.delivered && !groups.retry && !groups.dead && !groups.release) return 0;
    const range = this.partitioned ? s.createdRange : undefined;
    const keys = this.policy.ordered ? s.advancedKeys : [];
    const promote = keys.length > 0;
    const waiting = promote && (await this.hasWaitingIndex());
    const shape = `${groups.delivered}:${groups.retry}:${groups.dead}:${groups.release}:${groups.fallback}:${deleteDelivered}:${range !== undefined}:${promote}:${waiting}`;
    const sql = cachedStatement(this.settleSql, shape, () =>
      postgresSettle(
        this.names,
        groups,
        deleteDelivered,
        this.partitioned,
        range !== undefined,
        promote ? this.policy : undefined,
        waiting,
      ),
    );
    const params: unknown[] = range === undefined ? [token] : [token, range.from, range.to];
    params.push(...postgresSettlementValues(s, fallback));
    if (keys.length > 0) params.push(keys, promotionRun(this.policy, keys.length));
    // The dispatch locks come first so that the promotion in the statement sees every park
    // committed before it, and a park after it sees this settle (see `park`).
    const { rows } = await this.statementTransaction<{ changed: number }>(sql, params, {
      lockKeys: keys,
    });
    return rows[0]?.changed ?? 0;
  }

  async renewLease(
    ids: readonly string[],
    token: string,
    leaseMs: number,
    newToken?: string,
  ): Promise<number> {
    if (ids.length === 0) return 0;
    // Under the dispatcher's statement timeout, as its other lease statements.
    const params = [ids, token, leaseMs, newToken ?? null];
    return (await this.statementTransaction(postgresRenewLease(this.names), params, {})).affected;
  }

  async releaseExpired(): Promise<number> {
    return (await this.run(postgresReleaseExpired(this.names), [])).affected;
  }

  async lockOwner(session: SqlRunner, key: number): Promise<boolean> {
    const { rows } = await session.query<{ locked: boolean }>(
      'SELECT pg_try_advisory_lock($1::int4, $2::int4) AS locked',
      [POSTGRES_OWNER_LOCK_CLASS, key],
    );
    return rows[0]?.locked === true;
  }
  async unlockOwner(session: SqlRunner): Promise<void> {
    // The owner lock, and the 'leases' mode lock taken beside it.
    await session.query('SELECT pg_advisory_unlock_all()');
  }

  async enterLeasesMode(session: SqlRunner): Promise<readonly string[]> {
    const { lockClass, key } = leasesModeLockOf(this.names);
    const { rows } = await session.query<{ locked: boolean }>(
      'SELECT pg_try_advisory_lock_shared($1::int4, $2::int4) AS locked',
      [lockClass, key],
    );
    // Held exclusively for an instant: a 'partitions' dispatcher checking it in its heartbeat.
    if (rows[0]?.locked !== true) return ["a 'partitions' dispatcher's heartbeat"];
    // Read after taking the lock: a 'partitions' dispatcher that starts delivering from now on
    // finds it held, and one that started before is in the table.
    const working = await postgresWorkingPartitionOwners(session, this.names);
    if (working.length > 0) {
      await session.query('SELECT pg_advisory_unlock_shared($1::int4, $2::int4)', [lockClass, key]);
    }
    return working;
  }

  async shortenOrphanedLeases(graceMs: number, look: TakeoverLook): Promise<number> {
    let gone: number[];
    if (look === 'probe') {
      // Each owner seen alive tried by its lock, a lookup in the lock manager: no read of the
      // whole lock table, whose cost grows with every advisory lock the server holds.
      const seen = [...this.ownersSeen];
      if (seen.length === 0) return 0;
      gone = (
        await this.sql.query<{ k: string | number }>(POSTGRES_FREE_OWNERS, [
          POSTGRES_OWNER_LOCK_CLASS,
          seen,
        ])
      ).rows.map((r) => Number(r.k));
      for (const k of gone) this.ownersSeen.delete(k);
    } else {
      const live = new Set(
        (
          await this.sql.query<{ k: string | number }>(POSTGRES_LIVE_OWNERS, [
            POSTGRES_OWNER_LOCK_CLASS,
          ])
        ).rows.map((r) => Number(r.k)),
      );
      // A list looks at the owners seen at the last one; a full look at every owner with a
      // lease in the table, a pass over the leases.
      const looked =
        look === 'full'
          ? (await this.sql.query<{ k: string }>(postgresLeaseOwners(this.names))).rows.flatMap(
              (r) => ownerKeyOf(r.k) ?? [],
            )
          : [...this.ownersSeen];
      this.ownersSeen = live;
      gone = looked.filter((k) => !live.has(k));
    }
    if (gone.length === 0) return 0;
    return this.sql.transaction(async (tx) => {
      const free = (
        await tx.query<{ k: string | number }>(POSTGRES_FREE_OWNERS, [
          POSTGRES_OWNER_LOCK_CLASS,
          gone,
        ])
      ).rows.map((r) => ownerHex(Number(r.k)));
      if (free.length === 0) return 0;
      return (await tx.query(postgresShortenOwnerLeases(this.names), [graceMs, free])).affected;
    });
  }

  async releaseClaim(token: string): Promise<number> {
    return (await this.run(postgresReleaseClaim(this.names), [token])).affected;
  }

  async promoteOrphans(limit: number): Promise<number> {
    if (!this.policy.ordered) {
      return (await this.run(postgresReleaseAllWaiting(this.names), [limit])).affected;
    }
    // In a transaction for its planner settings (see `transaction`).
    const { rows: records } = await this.transaction(
      (run) => run<{ key: string | null }>(postgresOrphanKeys(this.names, this.policy), [limit]),
      { plans: 'custom' },
    );
    const keys = records.flatMap((r) => (r.key === null ? [] : [r.key]));
    if (keys.length === 0) return 0;
    return this.promoteKeys(keys);
  }

  async purge(
    status: 'delivered' | 'dead',
    olderThanMs: number,
    limit: number,
    archive = false,
    types?: PurgeTypes,
  ): Promise<number> {
    const { rows: records } = await this.run<{ key: string | null }>(
      postgresPurge(this.names, status, this.partitioned, archive, types),
      [olderThanMs, limit],
    );
    if (status === 'dead') await this.advanceDeleted(records);
    return records.length;
  }

  async purgeByAge(olderThanMs: number, limit: number): Promise<number> {
    const { rows } = await this.run(postgresPurgeByAge(this.names), [olderThanMs, limit]);
    return rows.length;
  }

  async deleteDead(messageIds: readonly string[]): Promise<number> {
    if (messageIds.length === 0) return 0;
    const { rows: records } = await this.run<{ key: string | null }>(
      postgresDeleteDead(this.names, this.partitioned),
      [messageIds],
    );
    await this.advanceDeleted(records);
    return records.length;
  }

  /** A deleted dead message no longer blocks its key: the next one may go. */
  private async advanceDeleted(rows: readonly { key: string | null }[]): Promise<void> {
    if (!this.policy.ordered) return;
    const keys = [...new Set(rows.flatMap((r) => (r.key === null ? [] : [r.key])))];
    if (keys.length > 0) await this.promoteKeys(keys);
  }

  async requeueDead(messageIds?: readonly string[]): Promise<RequeueReport> {
    if (messageIds !== undefined && messageIds.length === 0) return { requeued: 0, resequenced: 0 };
    return this.transaction(
      async (run) => {
        if (this.policy.ordered && someDeadSkip(this.policy)) {
          // The keys' enqueue locks, taken before deciding where each message goes: no message of
          // these keys can commit (and so be claimed) between the decision and the requeue, and
          // every one that committed before is seen by it.
          const { rows: keys } = await run<{ key: string }>(postgresDeadKeys(this.names), [
            messageIds ?? null,
          ]);
          await run(postgresLockKeys(), [
            this.lockNamespace,
            sortedKeyLocks(keys.map((k) => k.key)),
          ]);
        }
        const { rows: records } = await run<{ id: string; key: string | null; overtaken: boolean }>(
          postgresDeadToRequeue(this.names, this.policy),
          [messageIds ?? null],
        );
        const inPlace = records.filter((r) => !r.overtaken).map((r) => r.id);
        const moved = records.filter((r) => r.overtaken);
        // Moved to the end of their key's queue, like an enqueue under the locks taken above.
        const resequenced =
          moved.length === 0
            ? 0
            : (await run(postgresResequence(this.names), [moved.map((r) => r.id)])).affected;
        const requeued =
          inPlace.length === 0
            ? 0
            : (await run(postgresRequeueInPlace(this.names), [inPlace])).affected;
        return { requeued, resequenced };
      },
      { plans: 'custom' },
    );
  }

  async stats(): Promise<OutboxStats> {
    const [row] = (await this.run<StatsRow>(postgresStats(this.names), [])).rows;
    return {
      pending: row?.pending ?? 0,
      leased: row?.leased ?? 0,
      delivered: row?.delivered ?? 0,
      dead: row?.dead ?? 0,
      oldestPendingAgeMs:
        row?.oldest_ms === null || row?.oldest_ms === undefined
          ? null
          : Math.round(Number(row.oldest_ms)),
    };
  }

  async listen(onWake: () => void, onMembers?: () => void): Promise<() => Promise<void>> {
    const listen = this.sql.listen?.bind(this.sql);
    if (listen === undefined) return () => Promise.resolve();
    const channel = this.names.quote(this.channel);
    let stopped = false;
    let unlisten: (() => Promise<void>) | undefined;
    let retry: NodeJS.Timeout | undefined;

    // A dropped LISTEN connection only costs latency (polling continues): reconnect, and wake
    // the dispatcher once back, for what was committed meanwhile.
    const connect = async (): Promise<void> => {
      const onNotify = (payload: string): void =>
        payload === MEMBERS_NOTICE ? onMembers?.() : onWake();
      unlisten = await listen(channel, onNotify, (error) => {
        this.logger.warn(`LISTEN connection lost: ${describeError(error)}; reconnecting`);
        unlisten = undefined;
        schedule();
      });
    };
    const schedule = (): void => {
      if (stopped || retry !== undefined) return;
      retry = setTimeout(() => {
        retry = undefined;
        connect().then(onWake, (error: unknown) => {
          this.logger.warn(`LISTEN reconnect failed: ${describeError(error)}`);
          schedule();
        });
      }, RELISTEN_DELAY_MS);
    };

    await connect();
    return async () => {
      stopped = true;
      if (retry !== undefined) clearTimeout(retry);
      await unlisten?.();
      unlisten = undefined;
    };
  }

  async close(): Promise<void> {
    // The DataSource belongs to the application: only the NOTIFY in flight is ours.
    await this.notifier?.close();
  }

  /** Promotes the next waiting messages of each key, under the keys' dispatch locks. */
  private async promoteKeys(keys: readonly string[]): Promise<number> {
    const sql = postgresPromote(this.names, this.policy, await this.hasWaitingIndex());
    const params = [keys, promotionRun(this.policy, keys.length)];
    return (await this.statementTransaction(sql, params, { lockKeys: keys })).affected;
  }

  /**
   * Whether the table has schema step 5's waiting index, read from the catalog at the first
   * promotion and kept (a migration while the app runs takes effect at its restart). Without
   * it, promotions probe every key as before, and the app is told once how to add it.
   */
  private hasWaitingIndex(): Promise<boolean> {
    // A failed read (the database away) is not kept: the next promotion reads again.
    this.waitingIndex ??= this.readWaitingIndex().catch((error: unknown) => {
      this.waitingIndex = undefined;
      throw error;
    });
    return this.waitingIndex;
  }

  private async readWaitingIndex(): Promise<boolean> {
    const { text, params } = postgresHasWaitingIndex(this.names);
    const { rows } = await this.run<{ n: number }>(text, params);
    const present = (rows[0]?.n ?? 0) > 0;
    if (!present) {
      this.logger.warn(
        OutboxMessages.waitingIndexMissing(this.names.table, {
          tableName: this.names.tableName,
          schema: this.names.schema ?? undefined,
          keyLock: false,
        }),
      );
    }
    return present;
  }

  /**
   * Runs statements in one READ COMMITTED transaction whose statements the server cancels
   * after `dbTimeoutMs`, so a stuck lock or connection cannot hold the dispatcher forever; with
   * `lockKeys`, under those keys' dispatch locks, taken before any of them. The settings and the
   * locks open the transaction, sent with its BEGIN where the port can (`transactionOpening`):
   * three round trips for one statement, not five (`statementTransaction` makes it one).
   *
   * Its statements run generic plans unless `plans` says 'custom' (see postgresOpening).
   *
   * With `claimTurn`, the transaction first waits for any other claim on this table to end
   * (for `CLAIM_TURN_WAIT_MS` at most).
   * Claims that run at once read the same head of the queue; the later one found those rows
   * locked by the first and leased nothing, an empty claim that cost a window read and key
   * probes on the server and sent its dispatcher to wait (bench P6: about one such claim per
   * 1 000 messages with 2 dispatchers, two with 4). Waiting its turn, a claim's statement
   * starts after the previous claim committed, and reads past the rows that one leased.
   */
  private transaction<T>(
    work: (run: Run) => Promise<T>,
    options: TransactionOptions = {},
  ): Promise<T> {
    const opening = this.opening(options);
    const run =
      (tx: SqlRunner): Run =>
      <R>(sql: string, params: unknown[]) => {
        const options = this.preparedOptions(sql);
        return options === undefined
          ? tx.query<R>(sql, params)
          : tx.query<R>(sql, params, options).catch((error: unknown) => {
              throw this.lostDispatchStatement(error);
            });
      };
    if (this.sql.transactionOpening !== undefined) {
      return this.sql.transactionOpening(opening, (tx) => work(run(tx)));
    }
    return this.sql.transaction(async (tx) => {
      for (const statement of opening) await tx.query(statement);
      return work(run(tx));
    });
  }

  /** The statements that open a transaction of `transaction` (see there). */
  private opening({
    lockKeys = [],
    claimTurn = false,
    plans = 'generic',
  }: TransactionOptions): string[] {
    // A port that sends the opening with the BEGIN in one query takes the cheaper SET LOCALs.
    const form = this.sql.transactionOpening === undefined ? 'select' : 'set';
    const opening = postgresOpening(
      this.timeoutMs,
      this.dispatchNamespace,
      sortedKeyLocks(lockKeys),
      plans,
      form,
    );
    if (claimTurn) {
      opening.push(
        ...postgresClaimTurn(
          this.dispatchNamespace,
          CLAIM_TURN_LOCK,
          Math.max(1, Math.min(CLAIM_TURN_WAIT_MS, Math.floor(this.timeoutMs / 2))),
          form,
        ),
      );
    }
    return opening;
  }

  /**
   * One statement in a transaction of its own, as `transaction` runs it (with generic plans),
   * in one round trip where the port can (`transactionStatement`): BEGIN, the opening, an
   * `EXECUTE` of the named statement with its values written in as constants, and COMMIT in
   * one simple query, once the connection has prepared it. On a busy machine each round trip
   * of these short transactions is time the batch waits for the CPU, and node CPU besides:
   * three of them per claim and per settle before. Values that cannot be written so (see
   * postgres-literal.ts), or statements not prepared, take `transaction`'s three round trips.
   */
  private async statementTransaction<R>(
    sql: string,
    params: readonly unknown[],
    options: TransactionOptions & { readonly onSent?: () => void },
  ): Promise<SqlResult<R>> {
    // Written into the query as a name: only one as statementName makes it (checked, not assumed).
    const prepared = this.preparedOptions(sql)?.prepare;
    const named = prepared !== undefined && STATEMENT_NAME.test(prepared) ? prepared : undefined;
    const literals = named === undefined ? undefined : postgresLiterals(params);
    const oneTrip = this.sql.transactionStatement?.bind(this.sql);
    if (named === undefined || literals === undefined || oneTrip === undefined) {
      return this.transaction((run) => {
        const answer = run<R>(sql, [...params]);
        options.onSent?.();
        return answer;
      }, options);
    }
    const statement = {
      text: sql,
      params,
      name: named,
      executed: `EXECUTE ${named}(${literals.join(', ')})`,
    };
    return oneTrip<R>(this.opening(options), statement, options.onSent).catch((error: unknown) => {
      throw this.lostDispatchStatement(error);
    });
  }

  /**
   * The name a statement of the outbox's own transactions runs under, with `preparedStatements`:
   * PostgreSQL then parses it once per connection instead of on every claim and settle (long
   * statements: most of what a claim cost the server besides the claim's own work), and plans
   * it once too (a generic plan: `plan_cache_mode`, set in the transaction's opening).
   * Every text comes from a builder of this folder, so the names are as few as the statements'
   * shapes.
   */
  private preparedOptions(sql: string): SqlQueryOptions | undefined {
    if (!this.prepared || this.dispatchUnprepared) return undefined;
    let options = this.preparedNames.get(sql);
    if (options === undefined) {
      options = { prepare: statementName(sql) };
      this.preparedNames.set(sql, options);
    }
    return options;
  }

  /**
   * A failed prepared statement of the outbox's own transactions. When the server lost it (a
   * pooler that does not keep prepared statements per connection), the store stops preparing
   * them for good and says so once: the caller's retry (the dispatcher retries a settle until
   * its lease ends, and claims again after a pause) then runs as plain text. Failing every try
   * instead would leave published batches unsettled, to be published again.
   */
  private lostDispatchStatement(error: unknown): unknown {
    const failure = preparedFailure(
      error,
      lostPreparedStatement,
      OutboxMessages.dispatchPreparedStatementLost,
    );
    if (failure !== error && !this.dispatchUnprepared) {
      this.dispatchUnprepared = true;
      this.logger.warn(describeError(failure));
    }
    return failure;
  }

  /** Runs one statement on a pooled connection, outside any transaction. */
  private run<T = unknown>(sql: string, params: unknown[]): Promise<SqlResult<T>> {
    return this.sql.query<T>(sql, params);
  }
}

/** A name as `statementName` gives it: an identifier that needs no quoting. */
const STATEMENT_NAME = /^[a-z][a-z0-9_]{0,62}$/;

/**
 * The dispatch-namespace lock claims take turns on. Key locks are `hashKey` values, never
 * negative, so no key's lock is this one.
 */
const CLAIM_TURN_LOCK = -1;

/**
 * The longest a claim waits for its turn (or half `dbTimeoutMs` when that is less). A turn
 * lasts one claim, milliseconds; a longer wait means the claim holding it is stuck.
 */
const CLAIM_TURN_WAIT_MS = 1_000;

/** PostgreSQL's 55P03 (lock_not_available): `lock_timeout` ended a wait for a lock. */
function lockTimedOut(error: unknown): boolean {
  // As the driver answers it, or as an ORM wraps it (TypeORM's driverError, an Error's cause).
  const e = error as { code?: unknown; driverError?: { code?: unknown }; cause?: unknown } | null;
  return (
    e?.code === '55P03' ||
    e?.driverError?.code === '55P03' ||
    (e?.cause !== undefined && e.cause !== error && lockTimedOut(e.cause))
  );
}

/** A lease by id answers one row even when it leased nothing, to carry the unseen ids. */
type ClaimIdsRow = Omit<ClaimedRow, 'id'> & {
  id: ClaimedRow['id'] | null;
  unseen: string[] | null;
  due_in_ms: number | string | null;
};

/** A claim answers one row even when it leased nothing, to carry the blocked keys. */
type ClaimRow = Omit<ClaimedRow, 'id'> & {
  id: ClaimedRow['id'] | null;
  blocked: string[] | null;
  in_flight: number;
  contended: number;
};

type Run = <R = unknown>(sql: string, params: unknown[]) => Promise<SqlResult<R>>;

/** How `transaction` opens: under the keys' dispatch locks, after the claims' turn, which plans. */
interface TransactionOptions {
  readonly lockKeys?: readonly (string | null)[];
  readonly claimTurn?: boolean;
  readonly plans?: 'generic' | 'custom';
}

/** Distinct lock ids of keys, ascending: every locker takes them in one order, so none deadlock. */
/** The rows in order, without the later ones repeating an earlier row's message id. */
function firstOfEachId(rows: readonly NewOutboxRow[]): readonly NewOutboxRow[] {
  const seen = new Set<string>();
  const first = rows.filter((r) => !seen.has(r.messageId) && seen.add(r.messageId) !== undefined);
  return first.length === rows.length ? rows : first;
}

/**
 * What PostgreSQL answers when a connection's prepared statements are not the ones its client
 * prepared: 26000 (no such statement: the server side was reset or switched) and 42P05 (already
 * exists: another client prepared it on a server connection a pooler shares).
 */
function lostPreparedStatement(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === '26000' || code === '42P05';
}
