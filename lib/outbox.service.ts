import { Inject, Injectable, Logger, type OnApplicationShutdown } from '@nestjs/common';
import { getOutboxEventMetadata } from './message/outbox-event.decorator';
import { markClaimChecks } from './message/claim-check-mark';
import type { EntityManager } from 'typeorm';
import { OutboxInvalidMessageError } from './errors/outbox-invalid-message.error';
import { OutboxTransactionRequiredError } from './errors/outbox-transaction-required.error';
import type {
  EnqueueOptions,
  OutboxHeaders,
  OutboxMessage,
} from './message/outbox-message.interface';
import { parseBrokerAttributes } from './message/broker-attributes';
import type { OutboxPublisher } from './publishers/outbox-publisher.interface';
import type {
  NewOutboxRow,
  OutboxAdminPort,
  OutboxEnqueuePort,
  OutboxStats,
  OutboxStore,
  OutboxUpkeepPort,
} from './store/ports/outbox-store.port';
import { writtenKeyedRows } from './store/shared-sql/key-sequence';
import { subjectKeyVault, type SubjectKeyVault } from './store/subject-key-vault';
import { CommitWatcher } from './dispatch/poll/commit-watcher';
import {
  checkedTenant,
  OutboxMessageSerializer,
  refusedHeaderName,
} from './message/outbox-message.serializer';
import type { OutboxConnection } from './store/ports/outbox-connection';
import {
  OUTBOX_COMMITS,
  OUTBOX_CONNECTION,
  OUTBOX_DELIVERY_PLAN,
  OUTBOX_HEADER_TENANT,
  OUTBOX_OPTIONS,
  OUTBOX_STORE,
} from './outbox.constants';
import { OutboxMessages } from './outbox.messages';
import type { ResolvedOutboxOptions } from './options/resolve-outbox-options';
import type { DeliveryDuties } from './options/delivery-duties';
import { refuseUnknownKeys } from './internal/known-keys';

/** What enqueue's per-call options accept; the build fails when `EnqueueOptions` gains a key. */
const ENQUEUE_OPTION_KEYS = {
  '': { availableAt: true, delayMs: true } satisfies Record<keyof EnqueueOptions, true>,
};

/** What `enqueue()` accepts: an `@OutboxEvent()` instance or a plain message. */
export type OutboxInput = object | OutboxMessage;

/** What `OutboxService.enqueueWithReport` did. */
export interface EnqueueReport {
  /** The message id of every message, in the order given. */
  readonly messageIds: readonly string[];
  /** Ids given by the caller (`messageId`, `dedupeKey`) that were already in the table: not written. */
  readonly duplicates: readonly string[];
}

/**
 * The store as the service uses it: enqueue's face, what its deprecated dead-letter methods
 * still call (until 1.0 removes them), and the close it owes the store at shutdown.
 */
type OutboxServiceStore = OutboxEnqueuePort &
  Pick<OutboxAdminPort, 'requeueDead' | 'stats'> &
  Pick<OutboxUpkeepPort, 'purge'> &
  Pick<OutboxStore, 'close'>;

/**
 * Writes messages into the outbox inside the caller's transaction, and gives operators access to
 * dead letters and counts. `Tx` is the caller's transaction handle: an EntityManager with
 * `dataSource` (the default), what the `connection` joins otherwise (`OutboxService<PoolClient>`
 * with `pgOutbox(pool)` of `nestjs-outbox/pg`, `OutboxService<Transaction<DB>>` with `kyselyOutbox`).
 */
@Injectable()
export class OutboxService<Tx = EntityManager> implements OnApplicationShutdown {
  private readonly serializer: OutboxMessageSerializer;
  private readonly logger = new Logger('OutboxService');
  /** Event types already warned of: their class has a policy this instance does not apply. */
  private readonly unappliedPolicies = new Set<string>();
  private keys: SubjectKeyVault | undefined;

  constructor(
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    @Inject(OUTBOX_STORE) private readonly store: OutboxServiceStore,
    @Inject(OUTBOX_CONNECTION) private readonly connection: OutboxConnection<Tx>,
    @Inject(OUTBOX_COMMITS) private readonly commits: CommitWatcher<Tx>,
    @Inject(OUTBOX_DELIVERY_PLAN) private readonly duties: DeliveryDuties,
  ) {
    this.serializer = new OutboxMessageSerializer(options.maxPayloadBytes);
  }

  /**
   * Writes one message, or many in one statement, in the transaction of `manager`. Resolves to
   * the message id(s). Throws `OutboxInvalidMessageError` for bad input and
   * `OutboxTransactionRequiredError` when no transaction is open; either way nothing is written,
   * and the error rolls back the caller's transaction when left to propagate.
   *
   * @param manager the open transaction: with `dataSource`, its EntityManager
   *   (`dataSource.transaction(m => …)` or `queryRunner.manager`); with `connection`, what it
   *   joins (a `PoolClient` after `BEGIN` for `pgOutbox`). Optional when an ambient transaction
   *   is configured.
   */
  // The array overload comes first: an array is also an `object`, so the single-message
  // overload would otherwise match it and type the result as one id.
  enqueue(
    messages: readonly OutboxInput[],
    manager?: Tx,
    options?: EnqueueOptions,
  ): Promise<string[]>;
  enqueue(message: OutboxInput, manager?: Tx, options?: EnqueueOptions): Promise<string>;
  async enqueue(
    input: OutboxInput | readonly OutboxInput[],
    manager?: Tx,
    options?: EnqueueOptions,
  ): Promise<string | string[]> {
    const { messageIds } = await this.write(input, manager, options);
    return Array.isArray(input) ? [...messageIds] : (messageIds[0] as string);
  }

  /**
   * `enqueue`, resolving to what it did: every message id, and which of them were already in the
   * table and so were not written (`duplicates`: only ever messages given a `messageId` or
   * `dedupeKey`). A duplicate keeps the row that is there, payload included, whatever this call
   * carried: compare or log as your use case needs. An id is remembered while its row is in the
   * table (see the README's "Idempotent enqueue" for how long that is).
   */
  async enqueueWithReport(
    input: OutboxInput | readonly OutboxInput[],
    manager?: Tx,
    options?: EnqueueOptions,
  ): Promise<EnqueueReport> {
    return this.write(input, manager, options);
  }

  private async write(
    input: OutboxInput | readonly OutboxInput[],
    manager: Tx | undefined,
    options: EnqueueOptions | undefined,
  ): Promise<EnqueueReport> {
    const list: readonly OutboxInput[] = Array.isArray(input) ? input : [input];
    // Validate everything before touching the database: a bad message writes nothing. An
    // unknown option too: a misspelt `delayMS` would otherwise send the message at once.
    refuseUnknownKeys(
      options,
      ENQUEUE_OPTION_KEYS,
      ({ path, suggestion, accepted }) =>
        new OutboxInvalidMessageError(
          OutboxMessages.unknownRuntimeOption(
            'OutboxService.enqueue()',
            path,
            suggestion,
            accepted,
          ),
          'invalid-schedule',
          0,
        ),
    );
    let rows = this.withTenants(
      this.withProvidedHeaders(
        list.map((item, index) => this.serializer.toRow(item, index, options)),
      ),
    );
    rejectRepeatedIds(rows);
    this.warnOfUnappliedPolicies(list);
    if (this.duties.jsonRowsOnly) rejectWhatDebeziumDrops(rows);
    const personal = rows.some((row) => row.personal !== undefined);
    if (personal && this.options.erasure === null) rejectPersonalWithoutErasure(rows);
    // Sealed rows are checked once sealed (the size the broker gets), in the transaction.
    if (!personal) rows = this.checkAsSent(rows);
    const tx = manager ?? (this.currentTransaction() as Tx | undefined);
    if (tx === undefined) {
      // TypeORM's message names the EntityManager; another library's names its own handle.
      throw this.options.connection === undefined
        ? new OutboxTransactionRequiredError()
        : new OutboxTransactionRequiredError(OutboxMessages.connectionTransactionRequired());
    }
    // Checked even for an empty list, as before: a call outside a transaction is a mistake.
    const runner = this.connection.join(tx);
    let duplicates: readonly string[] = [];
    if (personal) {
      rows = this.checkAsSent(await this.vault().seal(runner, rows));
    }
    if (rows.length > 0) {
      duplicates = await this.store.insert(runner, rows, this.options.ordering.queue.ordered);
      if (this.options.ordering.sequence) {
        await this.store.numberKeys(runner, writtenKeyedRows(rows, duplicates));
      }
      this.commits.track(tx);
    }
    return { messageIds: rows.map((r) => r.messageId), duplicates };
  }

  /**
   * Marks the rows the claim check sends by reference and refuses what the publisher says it
   * could never deliver, on the payloads as they will be sent.
   */
  private checkAsSent(given: NewOutboxRow[]): NewOutboxRow[] {
    const claimCheck = this.options.claimCheck;
    const rows = claimCheck === null ? given : markClaimChecks(given, claimCheck.thresholdFor);
    const publisher = this.options.publisher;
    if (publisher?.checkEnqueue !== undefined) rejectWhatThePublisherRefuses(rows, publisher);
    return rows;
  }

  /** The erasure's key table beside the outbox table, made on first use. */
  private vault(): SubjectKeyVault {
    const erasure = this.options.erasure;
    if (erasure === null) throw new Error('OutboxService: the erasure option is not set');
    this.keys ??= subjectKeyVault(
      this.connection.sql.databaseType,
      this.options,
      erasure.keyWrapper,
    );
    return this.keys;
  }

  /**
   * An event class whose @OutboxEvent has a policy this instance's dispatcher does not know
   * (the class is not in its `events`): said once per type, since its messages get the defaults.
   */
  private warnOfUnappliedPolicies(list: readonly OutboxInput[]): void {
    // An instance that publishes nothing (enqueue only, or delivered by another engine): the
    // policies that matter are those of the instance that delivers.
    if (!this.duties.publishes) return;
    for (const item of list) {
      if (item === null || typeof item !== 'object') continue;
      const meta = getOutboxEventMetadata(item);
      if (meta?.policy === undefined) continue;
      if (this.options.policies.types.has(meta.type) || this.unappliedPolicies.has(meta.type)) {
        continue;
      }
      this.unappliedPolicies.add(meta.type);
      this.logger.warn(
        OutboxMessages.policyNotApplied(item.constructor.name, meta.type, this.options.name),
      );
    }
  }

  /**
   * The transaction the current call runs in, from the `ambientTransaction` option; undefined
   * when none is configured or none is active. The event-bus bridges ask it before they write.
   * Typed `unknown` so that `Tx` stays in parameter positions only: an `OutboxService<unknown>`
   * (what `moduleRef.get(OutboxService)` gives) must still fit `OutboxService<EntityManager>`.
   */
  currentTransaction(): unknown {
    return this.options.ambientTransaction?.currentManager();
  }

  /**
   * Puts dead-lettered messages back in the queue with their attempts reset: those with the
   * given message ids (as logged and as sent in `x-outbox-message-id`), or all of them. A dead
   * message goes back to the head of its key when its key waited for it (`onDeadLetter:
   * 'block'`); when later messages of its key went ahead (`'skip'`), it goes to the end of its
   * key's queue, so it never runs alongside or overtakes them. Resolves to how many.
   *
   * @deprecated Dead letters have one door, `OutboxAdmin`: `admin.retry(messageIds)` or
   * `admin.retryWhere({ all: true })` (same store operation, with a report). Removed in 1.0.
   */
  async retryDead(messageIds?: readonly string[]): Promise<number> {
    const { requeued, resequenced } = await this.store.requeueDead(messageIds);
    return requeued + resequenced;
  }

  /**
   * Deletes dead-lettered messages older than `olderThanMs` (all by default), up to `limit`.
   *
   * @deprecated Use `OutboxAdmin.purgeWhere({ olderThanMs })` or `purge(messageIds)`. Removed in 1.0.
   */
  purgeDead(olderThanMs = 0, limit = 10_000): Promise<number> {
    return this.store.purge('dead', olderThanMs, limit);
  }

  /**
   * Counts by status and the age of the oldest pending message.
   *
   * @deprecated Use `OutboxAdmin.stats()` (the same figures). Removed in 1.0.
   */
  stats(): Promise<OutboxStats> {
    return this.store.stats();
  }

  async onApplicationShutdown(): Promise<void> {
    await this.store.close();
    await this.connection.close?.();
  }

  /**
   * Gives each row its tenant (its own, else the `tenants.resolve` function's, else the ambient
   * transaction's) and the `x-outbox-tenant` header that carries it to the broker. Without the
   * `tenants` option a row naming a tenant is refused: the table may have no column for it.
   */
  private withTenants(rows: NewOutboxRow[]): NewOutboxRow[] {
    const tenants = this.options.tenants;
    if (tenants === null) {
      const index = rows.findIndex((row) => row.tenant !== undefined);
      if (index >= 0) {
        throw new OutboxInvalidMessageError(OutboxMessages.tenantsOff(), 'invalid-tenant', index);
      }
      return rows;
    }
    if (rows.length === 0) return rows;
    // Asked before any await, so the functions see the caller's async context (nestjs-cls).
    let ambient: string | undefined;
    if (rows.some((row) => row.tenant === undefined)) {
      const resolved = tenants.resolve?.() ?? this.options.ambientTransaction?.currentTenant?.();
      if (resolved !== undefined) {
        ambient = checkedTenant(
          resolved,
          (problem) =>
            new OutboxInvalidMessageError(
              OutboxMessages.invalidField('tenant from tenants.resolve', problem),
              'invalid-tenant',
              0,
            ),
        );
      }
    }
    return rows.map((row) => {
      const tenant = row.tenant ?? ambient;
      if (tenant === undefined) return row;
      const headers =
        row.headers === '{}'
          ? JSON.stringify({ [OUTBOX_HEADER_TENANT]: tenant })
          : JSON.stringify({
              ...(JSON.parse(row.headers) as Record<string, string>),
              [OUTBOX_HEADER_TENANT]: tenant,
            });
      return Object.assign({}, row, { tenant, headers });
    });
  }

  /** Adds the `headersProvider` headers to each row, under the message's own headers. */
  private withProvidedHeaders(rows: NewOutboxRow[]): NewOutboxRow[] {
    // Called before any await, so the provider sees the caller's async context (active span).
    const provided = rows.length > 0 ? this.options.headersProvider?.() : undefined;
    if (provided === undefined) return rows;
    const entries = Object.entries(provided);
    if (entries.length === 0) return rows;
    for (const [name, value] of entries) {
      if (typeof value !== 'string' || name === '' || refusedHeaderName(name) !== undefined) {
        throw new OutboxInvalidMessageError(
          OutboxMessages.invalidField(
            `header ${JSON.stringify(name)} from the headersProvider option`,
            'expected a string value under a name that is not reserved (x-outbox-*, CC, BCC, __proto__)',
          ),
          'invalid-header',
          0,
        );
      }
    }
    const alone = JSON.stringify(provided);
    // Object.assign, not `{ ...row, headers }`: on Node 20 a spread with a property after it is
    // many times slower (see toClaimedRecord).
    return rows.map((row) =>
      Object.assign({}, row, {
        headers:
          row.headers === '{}'
            ? alone
            : JSON.stringify({
                ...provided,
                ...(JSON.parse(row.headers) as Record<string, string>),
              }),
      }),
    );
  }
}

const NO_HEADERS: OutboxHeaders = Object.freeze({});

/** What the publisher says at enqueue it could never deliver (`OutboxPublisher.checkEnqueue`). */
function rejectWhatThePublisherRefuses(
  rows: readonly NewOutboxRow[],
  publisher: OutboxPublisher,
): void {
  rows.forEach((row, index) => {
    const refusal = publisher.checkEnqueue?.({
      messageId: row.messageId,
      topic: row.topic,
      key: row.key,
      type: row.type,
      headers: row.headers === '{}' ? NO_HEADERS : (JSON.parse(row.headers) as OutboxHeaders),
      payload: row.binary?.bytes ?? row.payload,
      ...(row.binary === undefined ? {} : { contentType: row.binary.contentType }),
      ...(row.attributes === undefined
        ? {}
        : { attributes: parseBrokerAttributes(row.attributes) }),
    });
    if (refusal !== undefined) {
      throw new OutboxInvalidMessageError(
        OutboxMessages.refusedByPublisher(refusal.problem),
        refusal.reason,
        index,
      );
    }
  });
}

/** Personal data without the `erasure` option would be stored in clear: refused. */
function rejectPersonalWithoutErasure(rows: readonly NewOutboxRow[]): void {
  const index = rows.findIndex((row) => row.personal !== undefined);
  throw new OutboxInvalidMessageError(
    OutboxMessages.invalidField('personal', OutboxMessages.erasureOff()),
    'invalid-personal',
    index,
  );
}

/** One call naming one message id twice is a mistake, not a retry: refuse it. */
function rejectRepeatedIds(rows: readonly NewOutboxRow[]): void {
  const seen = new Set<string>();
  rows.forEach((row, index) => {
    if (row.idempotent !== true) return;
    if (seen.has(row.messageId)) {
      throw new OutboxInvalidMessageError(
        OutboxMessages.invalidField(
          'messageId',
          `message id ${row.messageId} (from messageId or dedupeKey) appears twice in one enqueue call`,
        ),
        'invalid-message-id',
        index,
      );
    }
    seen.add(row.messageId);
  });
}

/**
 * With delivery 'external' (`DeliveryDuties.jsonRowsOnly`), Debezium's outbox router publishes each row as it is committed, from
 * its JSON payload column: a binary body, broker attributes or a delay would be dropped without a
 * word (a `null` value, the default partition, at once). Refused, as any message that cannot be
 * delivered as written.
 */
function rejectWhatDebeziumDrops(rows: readonly NewOutboxRow[]): void {
  rows.forEach((row, index) => {
    const refuse = (
      field: string,
      what: string,
      reason: 'invalid-content-type' | 'invalid-attributes' | 'invalid-schedule',
    ): never => {
      throw new OutboxInvalidMessageError(
        OutboxMessages.invalidField(field, OutboxMessages.droppedByExternalDelivery(what)),
        reason,
        index,
      );
    };
    if (row.binary !== undefined) {
      refuse(
        'payload',
        'a binary payload (send the bytes base64-encoded in a JSON payload)',
        'invalid-content-type',
      );
    }
    if (row.attributes !== undefined)
      refuse('attributes', 'broker attributes', 'invalid-attributes');
    if (row.availableAt !== null || row.delayMs !== null) {
      refuse('availableAt', 'a delivery time (availableAt, delayMs)', 'invalid-schedule');
    }
  });
}
