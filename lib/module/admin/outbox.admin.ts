import { OutboxAdminInputError } from '../../errors/outbox-admin-input.error';
import { OutboxMessageExpiredError } from '../../errors/outbox-message-expired.error';
import type { OutboxPartitionOwner } from '../../store/ports/outbox-store.port';
import type { OutboxDelivery } from '../../options/outbox.options';
import { deliveredBy } from '../../options/resolve-delivery';
import { OutboxMessages } from '../../outbox.messages';
import type {
  OutboxAdminPort,
  OutboxEnqueuePort,
  OutboxStats,
} from '../../store/ports/outbox-store.port';
import { deadBlocksKeyOf, queuePolicyOf } from '../../options/queue-policy';
import { OUTBOX_DEFAULTS } from '../../options/outbox-defaults';
import type {
  ResolvedEventPolicies,
  ResolvedEventPolicy,
} from '../../options/resolve-event-policies';
import type { OutboxQueuePolicy } from '../../store/ports/outbox-store.port';
import { suggestOption } from '../../internal/did-you-mean';
import type { KnownOptionKeys } from '../../internal/did-you-mean';
import { refuseUnknownCallOptions } from '../../internal/known-keys';
import {
  outboxDatabase,
  outboxDialectOf,
  tableNamesFor,
} from '../../store/schema/outbox-table-ddl';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import {
  toBlockedKey,
  toDetail,
  toStuckLease,
  toSummary,
  type AdminDetailRow,
  type AdminRow,
  type AttemptRow,
  type BlockedKeyRow,
  type StuckLeaseRow,
} from './admin-row.mapper';
import type { AdminDialect } from '../../store/shared-sql/admin-dialect';
import type {
  OutboxBlockedKey,
  OutboxCounts,
  OutboxDeadLetterFilter,
  OutboxDeliveryPartitions,
  OutboxDeadLetterSelection,
  OutboxRetryReport,
  OutboxWhy,
  OutboxWhyHead,
  OutboxMessageDetail,
  OutboxMessageFilter,
  OutboxMessageStatus,
  OutboxMessageSummary,
  OutboxPage,
  OutboxPageRequest,
  OutboxPolicyView,
  OutboxStatusCounts,
  OutboxStuckLease,
  OutboxStuckLeaseQuery,
  OutboxTopicActivity,
  OutboxTopicCounts,
} from './outbox-admin.interfaces';
import type { SqlParams } from '../../store/shared-sql/sql-params';
import type { OutboxAuditTableOptions } from '../../store/shared-sql/audit-table';
import { OutboxRedriver, type RedriveContext } from './outbox-redrive';
import { OutboxGapRepairer } from './outbox-gap-repair';
import type { OutboxGapRepairOptions } from './gap-repair.interfaces';
import { OutboxEraser } from './outbox-erasure';
import type { OutboxEraseOptions, OutboxErasureReport } from './outbox-erasure.interfaces';
import type { OutboxKeyWrapper } from '../../message/erasure/key-wrapper';
import { subjectKeyVault } from '../../store/subject-key-vault';
import { refuseUnknownAdminOptions } from './admin-option-keys';
import {
  summarizeDeliveryPartitions,
  type DeliveryDispatcherRow,
  type DeliveryPartitionRow,
} from './delivery-partitions.summary';
import { schemaStepOf } from '../../store/schema/schema-steps';
import { describeError } from '../../internal/describe-error';
import { storedKeyCondition } from '../../store/rows/redrive-lane';
import type {
  OutboxRedriveFilter,
  OutboxRedriveOptions,
  OutboxRedrivePreview,
  OutboxRedrivePreviewOptions,
  OutboxRedriveRecord,
  OutboxRedriveReport,
} from './outbox-redrive.interfaces';
import type { SqlPort } from '../../store/ports/sql-port';
import {
  messageIdText,
  TEXT_MESSAGE_IDS,
  type MessageIdCodec,
} from '../../store/rows/message-id-codec';

/** Where the admin API finds the table, and how the app queues a key's messages. */
export interface OutboxAdminOptions {
  /** @default 'outbox' */
  readonly tableName?: string;
  /** PostgreSQL schema, or MySQL database. @default the connection's */
  readonly schema?: string | null;
  /**
   * The app's `delivery` option, as given to `OutboxModule`: with `'external'`, `why()` says
   * that Debezium (or another engine reading the log) delivers, instead of calling every message
   * due. @default 'poll'
   */
  readonly delivery?: OutboxDelivery;
  /** The app's `ordering` options; they decide which keys count as blocked. */
  readonly ordering?: {
    readonly enabled?: boolean;
    readonly onDeadLetter?: 'block' | 'skip';
    /** Re-drive copies take the next numbers of their keys, as enqueue gives them. */
    readonly sequence?: boolean;
    /** Types whose policy's `onDeadLetter` differs from `onDeadLetter`. */
    readonly deadLetterExceptions?: readonly string[];
  };
  /** The app's per-event-type policies; left out, every message shows the defaults. */
  readonly policies?: ResolvedEventPolicies;
  /**
   * The app's `dispatcher.claims`: how a due message is taken (`why()` says so), and what
   * `deliveryPartitions()` names where they are not in use. Each partition owner's liveness is
   * judged by what it promised with its heartbeat, so no timeout is needed.
   */
  readonly dispatcher?: { readonly claims?: 'leases' | 'partitions' };
  /** The app's `cleaner.archive`: re-drives then also find the rows in `<table>_archive`. */
  readonly cleaner?: { readonly archive?: boolean };
  /**
   * The audit table re-drives are recorded in and listed from (the console's audit log).
   * @default { tableName: 'outbox_console_audit' }
   */
  readonly auditTable?: OutboxAuditTableOptions;
  /**
   * The app's `tenants` option: when set, listings carry each message's `tenant` and filters
   * may name one (the table has schema step 7's `tenant_id`). @default none
   */
  readonly tenants?: object | null;
  /**
   * The app's `erasure` option. Not needed to erase (which unwraps no key): `erase()` works on
   * any table with schema step 11. @default none
   */
  readonly erasure?: { readonly keyWrapper: OutboxKeyWrapper } | null;
}

type Group<K extends keyof OutboxAdminOptions> = Record<
  keyof NonNullable<OutboxAdminOptions[K]>,
  true
>;

/** The keys of `new OutboxAdmin(sql, store, options)`'s options, and of their groups. */
const ADMIN_CONSTRUCTOR_KEYS = {
  '': {
    tableName: true,
    schema: true,
    delivery: true,
    ordering: true,
    policies: true,
    dispatcher: true,
    cleaner: true,
    auditTable: true,
    tenants: true,
    erasure: true,
  } satisfies Record<keyof OutboxAdminOptions, true>,
  ordering: {
    enabled: true,
    onDeadLetter: true,
    sequence: true,
    deadLetterExceptions: true,
  } satisfies Group<'ordering'>,
  dispatcher: { claims: true } satisfies Group<'dispatcher'>,
  cleaner: { archive: true } satisfies Group<'cleaner'>,
  auditTable: { tableName: true, schema: true } satisfies Group<'auditTable'>,
  erasure: { keyWrapper: true } satisfies Group<'erasure'>,
} as const satisfies KnownOptionKeys;

/**
 * Refuses, with `OutboxOptionsError` and before the admin is built, a key that
 * `OutboxAdminOptions` does not have: `new OutboxAdmin(sql, store, { table: 'orders_outbox' })`
 * would otherwise look at (and repair) the default table `outbox`. `tenants` and `policies` are
 * the module's own values, passed on as they are: their keys are not checked here.
 */
function refuseUnknownAdminConstructorOptions(options: unknown): void {
  refuseUnknownCallOptions('new OutboxAdmin()', options, ADMIN_CONSTRUCTOR_KEYS);
}

/** Largest page of a listing, and the batch size of retries and purges by filter. */
export const OUTBOX_ADMIN_MAX_LIMIT = 1_000;
const DEFAULT_LIMIT = 100;
const STATUSES: readonly OutboxMessageStatus[] = ['pending', 'waiting', 'delivered', 'dead'];
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const CURSOR = /^[0-9]{1,19}$/;
const FILTER_KEYS = {
  status: true,
  topic: true,
  type: true,
  key: true,
  errorContains: true,
  createdBefore: true,
  createdAfter: true,
  olderThanMs: true,
  tenant: true,
} satisfies Record<keyof OutboxMessageFilter, true>;

const invalid = (what: string, problem: string): OutboxAdminInputError =>
  new OutboxAdminInputError(`Invalid ${what} for OutboxAdmin: ${problem}.`, what);

/**
 * A retry or purge by filter must say what it selects: a field present with `undefined` (a
 * missing query parameter passed straight through) or an empty filter would otherwise select
 * every dead letter. `{ all: true }`, alone, says "every one" on purpose. Returns the filter
 * to apply.
 */
function bulkFilterOf(selection: OutboxDeadLetterSelection): OutboxDeadLetterFilter {
  if (typeof selection !== 'object' || selection === null) {
    throw invalid('filter', 'expected an object such as { topic: "orders" } or { all: true }');
  }
  const { all, ...filter } = selection as OutboxDeadLetterFilter & { all?: unknown };
  for (const [field, value] of Object.entries(filter)) {
    if (value === undefined) {
      throw invalid(
        `filter field "${field}"`,
        `it is present but undefined, which would select every dead letter; leave it out, or pass { all: true } to mean every one`,
      );
    }
  }
  const named = Object.keys(filter).length > 0;
  if (all !== undefined && all !== true) {
    throw invalid('filter field "all"', 'expected true (every dead letter) or no "all" field');
  }
  if (all === true && named) {
    throw invalid(
      'filter',
      '{ all: true } selects every dead letter: give it alone, or drop it and filter',
    );
  }
  if (all !== true && !named) {
    throw invalid(
      'filter',
      'an empty filter would select every dead letter; name a field, or pass { all: true } to mean every one',
    );
  }
  return filter;
}

function checkFilter(filter: OutboxMessageFilter, allowStatus: boolean, tenants = false): void {
  if (typeof filter !== 'object' || filter === null) {
    throw invalid('filter', 'expected an object such as { topic: "orders" }');
  }
  for (const key of Object.keys(filter)) {
    if (!Object.hasOwn(FILTER_KEYS, key) || (key === 'status' && !allowStatus)) {
      // An unknown field silently ignored would widen a purge to every dead letter.
      const hint =
        key === 'status'
          ? 'retries and purges only ever touch dead messages'
          : `${key} is not a filter field${suggestion(key)}`;
      throw invalid(`filter field "${key}"`, hint);
    }
  }
  const { status, topic, type, key, errorContains, createdBefore, createdAfter, olderThanMs } =
    filter;
  if (status !== undefined) {
    const list: readonly unknown[] = typeof status === 'string' ? [status] : status;
    if (
      !Array.isArray(list) ||
      list.length === 0 ||
      list.some((s) => !STATUSES.includes(s as OutboxMessageStatus))
    ) {
      throw invalid('filter status', `expected one or more of ${STATUSES.join(', ')}`);
    }
  }
  for (const [name, value] of [
    ['topic', topic],
    ['type', type],
    ['errorContains', errorContains],
  ] as const) {
    if (value !== undefined && (typeof value !== 'string' || value === '')) {
      throw invalid(`filter ${name}`, 'expected a non-empty string');
    }
  }
  if (key !== undefined && key !== null && typeof key !== 'string') {
    throw invalid('filter key', 'expected a string, or null for messages without a key');
  }
  const { tenant } = filter;
  if (tenant !== undefined) {
    if (!tenants) {
      throw invalid(
        'filter tenant',
        "tenant ids are off (set the module's tenants option, or --tenant on the CLI)",
      );
    }
    if (tenant !== null && (typeof tenant !== 'string' || tenant === '')) {
      throw invalid(
        'filter tenant',
        'expected a non-empty string, or null for messages without one',
      );
    }
  }
  for (const [name, value] of [
    ['createdBefore', createdBefore],
    ['createdAfter', createdAfter],
  ] as const) {
    if (value !== undefined && !(value instanceof Date && !Number.isNaN(value.getTime()))) {
      throw invalid(`filter ${name}`, 'expected a valid Date');
    }
  }
  if (olderThanMs !== undefined && !(Number.isFinite(olderThanMs) && olderThanMs >= 0)) {
    throw invalid('filter olderThanMs', 'expected a number of milliseconds, 0 or more');
  }
}

function suggestion(key: string): string {
  const near = suggestOption('', key, { '': FILTER_KEYS });
  return near === undefined
    ? ` (use ${Object.keys(FILTER_KEYS).join(', ')})`
    : `; did you mean ${near}?`;
}

function pageOf(request: OutboxPageRequest): { after: string | null; limit: number } {
  const after = request.after ?? null;
  if (after !== null && (typeof after !== 'string' || !CURSOR.test(after))) {
    throw invalid('cursor', `${JSON.stringify(after)} is not a cursor this API returned`);
  }
  const limit = request.limit ?? DEFAULT_LIMIT;
  if (!Number.isInteger(limit) || limit < 1 || limit > OUTBOX_ADMIN_MAX_LIMIT) {
    throw invalid(
      'limit',
      `expected an integer from 1 to ${OUTBOX_ADMIN_MAX_LIMIT}, got ${String(limit)}`,
    );
  }
  return { after, limit };
}

/** Lower-cased message ids, each checked to be a UUID (PostgreSQL would reject others). */
function messageIdsOf(messageIds: readonly string[]): string[] {
  if (!Array.isArray(messageIds)) throw invalid('message ids', 'expected an array of UUIDs');
  return messageIds.map((id) => {
    const normal = typeof id === 'string' ? id.trim().toLowerCase() : '';
    if (!UUID.test(normal)) throw invalid('message id', `${JSON.stringify(id)} is not a UUID`);
    return normal;
  });
}

function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** The page of rows fetched with `limit + 1`: the extra row only says there is a next page. */
function paged<R, T>(
  rows: readonly R[],
  limit: number,
  map: (row: R) => T,
  cursor: (item: T) => string,
): OutboxPage<T> {
  const items = rows.slice(0, limit).map(map);
  const last = items[items.length - 1];
  return { items, nextCursor: rows.length > limit && last !== undefined ? cursor(last) : null };
}

/** Whether the filter names statuses and none of them is delivered. */
function undeliveredOnly(filter: OutboxMessageFilter): boolean {
  const { status } = filter;
  if (status === undefined) return false;
  return typeof status === 'string' ? status !== 'delivered' : !status.includes('delivered');
}

const zero = (): { -readonly [K in keyof OutboxStatusCounts]: number } => ({
  pending: 0,
  waiting: 0,
  leased: 0,
  delivered: 0,
  dead: 0,
});

/**
 * Operations on the outbox table for people and tools: list and inspect messages, retry and
 * purge dead letters by id or by filter, find blocked keys and stuck leases, count.
 *
 * Injectable wherever `OutboxModule` is imported (also with `workers: false`); the `outbox` CLI
 * builds one of its own. Retries and purges go through the store's `requeueDead` and
 * `deleteDead`, so per-key order is kept as the dispatcher keeps it.
 * Listings page by row id (keyset): no page repeats or skips a row that was committed before
 * the listing began, whatever is written meanwhile.
 */
export class OutboxAdmin {
  private readonly sql: AdminDialect;
  private readonly names: OutboxTableNames;
  private readonly ordered: boolean;
  private readonly claims: 'leases' | 'partitions';
  /** The app's `dispatcher.claims` as given; null where unknown (the `outbox` command's admin). */
  private readonly claimsGiven: 'leases' | 'partitions' | null;
  private readonly dialect: string;
  private readonly queue: OutboxQueuePolicy;
  private readonly policies: ResolvedEventPolicies | undefined;
  /**
   * Whether this admin knows which types' dead letters hold their key (the app's policies, or
   * the types given in `ordering.deadLetterExceptions`); the `outbox` command's does not.
   */
  private readonly knowsTypeRules: boolean;
  private readonly redriver: OutboxRedriver;
  private readonly redriveContext: RedriveContext;
  private readonly eraser: OutboxEraser;
  /** Whether the table's tenant ids are read and filtered on (`OutboxAdminOptions.tenants`). */
  readonly tenants: boolean;

  /**
   * Who delivers this table's messages: `'external'` when Debezium (or another engine reading
   * the log) does, and pending only means "written" (the table never records its deliveries).
   */
  readonly delivery: 'dispatcher' | 'external';

  constructor(
    private readonly sqlPort: SqlPort,
    /** Its own face, and enqueue's for the re-drive, which writes copies as enqueue does. */
    private readonly store: OutboxAdminPort & OutboxEnqueuePort,
    options: OutboxAdminOptions = {},
  ) {
    refuseUnknownAdminConstructorOptions(options);
    const dialect = outboxDialectOf(sqlPort.databaseType);
    this.sql = outboxDatabase(dialect).admin;
    this.names = tableNamesFor(dialect, {
      tableName: options.tableName,
      schema: options.schema ?? undefined,
    });
    this.delivery = deliveredBy(options.delivery);
    this.claims = options.dispatcher?.claims ?? 'leases';
    this.claimsGiven = options.dispatcher?.claims ?? null;
    this.dialect = dialect;
    this.queue = queuePolicyOf(options.ordering);
    this.ordered = this.queue.ordered;
    this.policies = options.policies;
    this.knowsTypeRules =
      options.policies !== undefined || options.ordering?.deadLetterExceptions !== undefined;
    this.tenants = options.tenants !== undefined && options.tenants !== null;
    const vault = subjectKeyVault(
      sqlPort.databaseType,
      { tableName: options.tableName ?? 'outbox', schema: options.schema ?? null },
      options.erasure?.keyWrapper,
    );
    this.redriveContext = {
      vault,
      sqlPort,
      store,
      sql: this.sql,
      names: this.names,
      ordered: this.ordered,
      sequence: options.ordering?.sequence === true,
      lanes: this.delivery !== 'external',
      archive: options.cleaner?.archive === true,
      auditTable: options.auditTable,
    };
    this.redriver = new OutboxRedriver(this.redriveContext);
    this.eraser = new OutboxEraser({
      sqlPort,
      store,
      vault,
      ordered: this.ordered,
      sequence: options.ordering?.sequence === true,
      auditTable: options.auditTable,
    });
  }

  /**
   * Erases one subject by crypto-shredding (docs/erasure.md): destroys its data key, so that
   * every copy of its sealed personal data (the table, its archive, re-drive copies, what
   * brokers and consumers hold) can no longer be opened, and enqueues an erasure notice
   * (`outbox.subject-erased`, the key's id) on each topic and key its messages were written
   * for, after their last message there. Recorded in the audit log (who, why, the subject's
   * hash, the key's id) in the same transaction; refused with `OutboxRedriveRefusedError`
   * (`no-audit-table`), nothing erased, when the audit table cannot be read. A subject without
   * a live key answers `erased: false`, and is recorded too.
   */
  async erase(subject: string, options: OutboxEraseOptions): Promise<OutboxErasureReport> {
    refuseUnknownAdminOptions('erase', options);
    return this.eraser.erase(subject, options);
  }

  /**
   * How many delivered messages `redrive(filter)` would send again (exact, at this moment), the
   * first of them in queue order, and the `confirmation` of exactly those messages, which
   * `redrive()` takes as `expected`. Searches `<table>_archive` too with `cleaner.archive`.
   */
  async previewRedrive(
    filter: OutboxRedriveFilter,
    options?: OutboxRedrivePreviewOptions,
  ): Promise<OutboxRedrivePreview> {
    refuseUnknownAdminOptions('previewRedrive', options);
    return this.redriver.preview(filter, options);
  }

  /**
   * Sends the delivered messages matching `filter` again, as new messages (new ids, so that
   * consumers' inboxes take them; headers `x-outbox-redrive-of` and `x-outbox-redrive-id`),
   * in their original queue order, through the store's insert (key order and key locks as at
   * enqueue), a transaction per 500; to their own topic or `destination`, spread by
   * `ratePerSecond` over `available_at`. Recorded in the audit log (who, why, filter, count)
   * in the transaction of the first copies. Refused with `OutboxRedriveRefusedError`, nothing
   * sent, when the selection is not the messages of the `expected` confirmation (even with their
   * count), is above `maxCount`, is empty, or the audit table is missing; bad input with
   * `OutboxAdminInputError`.
   */
  async redrive(
    filter: OutboxRedriveFilter,
    options: OutboxRedriveOptions,
  ): Promise<OutboxRedriveReport> {
    refuseUnknownAdminOptions('redrive', options);
    return this.redriver.redrive(filter, options);
  }

  /**
   * What answers consumers' gap-repair requests (docs/gap-repair.md): keep the one returned (it
   * holds the rate limit) and hand it each request, from the HTTP route of
   * `nestjs-outbox/gap-repair` or a transport of yours. Throws `OutboxOptionsError` unless the
   * instance numbers its messages (`ordering.sequence`).
   */
  gapRepairer(options: OutboxGapRepairOptions = {}): OutboxGapRepairer {
    refuseUnknownAdminOptions('gapRepairer', options);
    return new OutboxGapRepairer(this.redriveContext, options);
  }

  /** Past re-drives from the audit log, newest first (`limit` 1 to 1000, default 50). */
  async redrives(
    options: { readonly limit?: number; readonly auditTable?: OutboxAuditTableOptions } = {},
  ): Promise<OutboxRedriveRecord[]> {
    refuseUnknownAdminOptions('redrives', options);
    return this.redriver.records(options.limit ?? 50, options.auditTable);
  }

  /**
   * Every policy this instance delivers under: the module's defaults (`'default'`) first, then
   * each event type's, by name.
   */
  policyList(): OutboxPolicyView[] {
    const types = [...(this.policies?.types.values() ?? [])].sort((a, b) =>
      a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
    );
    return [this.policyView('default'), ...types.map((p) => policyViewOf(p))];
  }

  /** The resolved policy a message of `eventType` is delivered under. */
  policyOf(eventType: string): OutboxPolicyView {
    return this.policyView(eventType);
  }

  private policyView(eventType: string): OutboxPolicyView {
    const resolved = this.policies?.policyFor(eventType);
    if (resolved !== undefined) return policyViewOf(resolved);
    // An admin built without the app's policies (the CLI): the ordering it was given, and what
    // it cannot know shown as the module's defaults.
    return {
      name: 'default',
      retry: {
        maxAttempts: OUTBOX_DEFAULTS.retry.maxAttempts.value,
        initialDelayMs: OUTBOX_DEFAULTS.retry.initialDelayMs.value,
        maxDelayMs: Math.max(300_000, OUTBOX_DEFAULTS.retry.initialDelayMs.value),
        factor: OUTBOX_DEFAULTS.retry.factor.value,
        jitter: OUTBOX_DEFAULTS.retry.jitter.value,
        maxAgeMs: OUTBOX_DEFAULTS.retry.maxAgeMs.value,
      },
      onDeadLetter: this.queue.deadBlocksKey ? 'block' : 'skip',
      deliveredRetentionMs: OUTBOX_DEFAULTS.cleaner.deliveredRetentionMs.value,
      deadRetentionMs: OUTBOX_DEFAULTS.cleaner.deadRetentionMs.value,
      maxAgeMs: 0,
    };
  }

  /** Whether a dead message of `eventType` holds back its key. */
  private deadBlocks(eventType: string): boolean {
    return this.ordered && deadBlocksKeyOf(this.queue, eventType);
  }

  /** Messages matching `filter`, in queue (id) order, one page at a time. */
  async list(
    filter: OutboxMessageFilter = {},
    page: OutboxPageRequest = {},
  ): Promise<OutboxPage<OutboxMessageSummary>> {
    checkFilter(filter, true, this.tenants);
    refuseUnknownAdminOptions('list', page);
    return this.listed(filter, page);
  }

  /** `list`, or with `lane` the messages stored under exactly that key or re-drive lane. */
  private async listed(
    filter: OutboxMessageFilter,
    page: OutboxPageRequest,
    lane?: string,
  ): Promise<OutboxPage<OutboxMessageSummary>> {
    const { after, limit } = pageOf(page);
    const p = this.sql.params();
    const where = this.where(p, filter, after, lane);
    const rows = await this.query<AdminRow>(
      `SELECT ${this.sql.summaryColumns}${this.tenants ? ', o.tenant_id' : ''} FROM ${this.names.table} AS o WHERE ${where} ORDER BY ${this.sql.listOrder(undeliveredOnly(filter))} LIMIT ${p.add(limit + 1)}`,
      p,
    );
    return paged(rows, limit, toSummary, (item) => item.id);
  }

  /** One message in full (payload, headers, lease), or null when there is none with this id. */
  async get(messageId: string): Promise<OutboxMessageDetail | null> {
    const [checked] = messageIdsOf([messageId]);
    const id = (await this.messageIds()).param(checked as string);
    const p = this.sql.params();
    const rows = await this.query<AdminDetailRow>(
      `SELECT ${this.sql.detailColumns} FROM ${this.names.table} AS o WHERE ${this.sql.messageIdIs(p, id)}`,
      p,
    );
    const [row] = rows;
    if (row === undefined) return null;
    // Keyed by message id, not row id: a dead message moved to the end of its key keeps it.
    const h = this.sql.params();
    const attempts = await this.query<AttemptRow>(
      `SELECT ${this.sql.attemptColumns} FROM ${this.names.attemptsTable} AS o WHERE ${this.sql.messageIdIs(h, id)} ORDER BY o.id`,
      h,
    );
    const detail = toDetail(row, attempts);
    return { ...detail, policy: this.policyView(detail.type) };
  }

  /**
   * Why a message is not out yet: its state and the exact reason (not found, delivered, dead
   * with its error, parked or queued behind which head of its key, leased by whom until when,
   * its lease expired, due later, or due now). Times are compared on the database clock.
   */
  async why(messageId: string): Promise<OutboxWhy> {
    const message = await this.get(messageId);
    if (message === null) {
      return {
        messageId,
        state: 'unknown',
        reason:
          'No message with this id: never enqueued in this table, or deleted (delivered rows go after cleaner.deliveredRetentionMs, dead ones when purged).',
        message: null,
        head: null,
      };
    }
    // "Now" on the database clock, from the row's age as the database computed it.
    const now = message.createdAt.getTime() + message.ageMs;
    const at = (d: Date): string => d.toISOString();
    const lastError = message.lastError === null ? '' : `; last error: ${message.lastError}`;
    const base = { messageId: message.messageId, message };
    if (message.status === 'delivered') {
      const when = message.deliveredAt === null ? '' : ` at ${at(message.deliveredAt)}`;
      return { ...base, state: 'delivered', reason: `Delivered${when}.`, head: null };
    }
    if (message.status === 'dead') {
      const { policy } = message;
      const blocks = this.deadBlocks(message.type);
      const key = JSON.stringify(message.key);
      const holds =
        !this.ordered || message.key === null
          ? ''
          : !this.knowsTypeRules
            ? this.deadHoldsUnknown(message.type, key, blocks)
            : policy.name === 'default'
              ? blocks
                ? ` It holds back the later messages of key ${key} until it is retried or purged (ordering.onDeadLetter 'block').`
                : ''
              : blocks
                ? ` Dead under policy '${policy.name}': onDeadLetter 'block', so it holds back the later messages of key ${key} until it is retried or purged.`
                : ` Dead under policy '${policy.name}': onDeadLetter 'skip', so later messages of its key go on.`;
      return {
        ...base,
        state: 'dead',
        reason: `Dead-lettered${message.deadAt === null ? '' : ` at ${at(message.deadAt)}`}${
          message.attempts === 0
            ? message.lastError?.startsWith(OutboxMessageExpiredError.name) === true
              ? ' unpublished: it expired before any attempt'
              : ' unpublished, before any attempt'
            : ` after ${message.attempts} attempt(s)`
        }${lastError}.${holds}`,
        head: null,
      };
    }
    if (this.delivery === 'external') {
      return {
        ...base,
        state: 'external',
        reason: `Written at ${at(message.createdAt)}; ${OutboxMessages.externalDeliveryStatus()}, so it is in the topic ${JSON.stringify(message.topic)} once the connector has read past its commit (watch the connector's lag). The cleaner deletes it after cleaner.deliveredRetentionMs.`,
        head: null,
      };
    }
    const found = await this.headOf(message);
    const head: OutboxWhyHead | null =
      found === null
        ? null
        : { messageId: found.messageId, status: found.status, lastError: found.lastError };
    if (message.status === 'waiting') {
      return {
        ...base,
        state: 'parked',
        reason:
          head === null
            ? 'Parked, and nothing earlier of its key holds it back any more: the unlocker promotes it.'
            : `Parked behind ${head.messageId} (${head.status}), the head of key ${JSON.stringify(message.key)}: it goes once that one is delivered${found?.deadBlocks === false ? ' or dead' : ''}.${this.deadHeadUnknown(head)}`,
        head,
      };
    }
    if (message.lockedUntil !== null && message.lockedUntil.getTime() > now) {
      return {
        ...base,
        state: 'leased',
        reason: `Being published by ${message.lockedBy ?? 'a dispatcher'}, leased until ${at(message.lockedUntil)} (attempt ${message.attempts}).`,
        head,
      };
    }
    if (message.lockedUntil !== null) {
      return {
        ...base,
        state: 'lease-expired',
        reason: `Its lease by ${message.lockedBy ?? 'a dispatcher'} expired at ${at(message.lockedUntil)} without an outcome (the dispatcher died or stalled); the next claim or the unlocker takes it back.`,
        head,
      };
    }
    if (message.availableAt.getTime() > now) {
      return {
        ...base,
        state: 'scheduled',
        reason: `Due at ${at(message.availableAt)}${message.attempts > 0 ? ` (retry backoff after ${message.attempts} attempt(s)${lastError})` : ' (scheduled)'}.`,
        head,
      };
    }
    if (head !== null) {
      return {
        ...base,
        state: 'behind-head',
        reason: `Due, but queued behind ${head.messageId} (${head.status}), the head of key ${JSON.stringify(message.key)}.${this.deadHeadUnknown(head)}`,
        head,
      };
    }
    return {
      ...base,
      state: 'due',
      reason:
        this.claims === 'partitions'
          ? 'Due now: the owner of its delivery partition reads it at its next read (partitionOwners() says who holds the partitions; a partition no one holds waits for a dispatcher to start).'
          : 'Due now: the next claim takes it (is a dispatcher running against this table?).',
      head: null,
    };
  }

  /**
   * What an admin without the app's per-type rules (the `outbox` command's) can say of a dead
   * letter's key: the rule it was given, and what the type's policy would change.
   */
  private deadHoldsUnknown(type: string, key: string, blocks: boolean): string {
    const given = blocks
      ? `under onDeadLetter 'block' it holds back the later messages of key ${key} until it is retried or purged; under a policy with onDeadLetter 'skip' they go on`
      : `under onDeadLetter 'skip' the later messages of key ${key} go on; under a policy with onDeadLetter 'block' it holds them back until it is retried or purged`;
    return (
      ` Whether it holds back its key is up to the app's policy for type ${JSON.stringify(type)}, which this admin was built without (it was given ordering.onDeadLetter '${blocks ? 'block' : 'skip'}'; the outbox command's --on-dead-letter): ` +
      `${given}. The app's OutboxAdmin.why() and console know which applies.`
    );
  }

  /** A dead head's hold, said as the rule given, when this admin cannot see the app's policies. */
  private deadHeadUnknown(head: OutboxWhyHead): string {
    if (this.knowsTypeRules || head.status !== 'dead') return '';
    return ` That holds under the onDeadLetter 'block' this admin was given; if the app's policy for the head's type says 'skip', the head holds nothing back (the app's OutboxAdmin.why() knows).`;
  }

  /** The first undelivered message of the message's key before it, when ordering holds it. */
  private async headOf(
    message: OutboxMessageDetail,
  ): Promise<(OutboxWhyHead & { readonly deadBlocks: boolean }) | null> {
    if (!this.ordered || message.key === null) return null;
    // What holds it is in its lane: its key's, or a re-drive copy's lane of its own.
    const lane = await this.storedKeyOf(message.messageId);
    if (lane === null) return null;
    const typed = (this.queue.deadLetterExceptions?.length ?? 0) > 0;
    const blocking: OutboxMessageStatus[] =
      this.queue.deadBlocksKey || typed ? ['pending', 'waiting', 'dead'] : ['pending', 'waiting'];
    // Where a dead message blocks by its type, the dead ones that do not are passed over.
    let after: string | undefined;
    for (;;) {
      const page = await this.listed(
        { status: blocking },
        { limit: typed ? 100 : 1, ...(after === undefined ? {} : { after }) },
        lane,
      );
      const first = page.items.find((m) => m.status !== 'dead' || this.deadBlocks(m.type));
      if (first !== undefined) {
        if (first.messageId === message.messageId) return null;
        if (BigInt(first.id) > BigInt(message.id)) return null;
        return {
          messageId: first.messageId,
          status: first.status,
          lastError: first.lastError,
          deadBlocks: this.deadBlocks(first.type),
        };
      }
      const last = page.items.at(-1);
      if (!typed || page.nextCursor === null || last === undefined) return null;
      if (BigInt(last.id) > BigInt(message.id)) return null;
      after = page.nextCursor;
    }
  }

  /**
   * Puts these dead messages back in the queue, attempts reset, each where its key's order
   * allows (see `docs/ordering-and-dead-letters.md`); ids that are not dead are ignored. A
   * message that died of its type's expiry is refused and named in `expired`: a retry could
   * only expire it again (see {@link OutboxRetryReport}).
   */
  async retry(messageIds: readonly string[]): Promise<OutboxRetryReport> {
    const ids = messageIdsOf(messageIds);
    if (ids.length === 0) return { requeued: 0, resequenced: 0, expired: [] };
    let requeued = 0;
    let resequenced = 0;
    const expired: string[] = [];
    const requeue = async (chunk: readonly string[]): Promise<void> => {
      const refused = await this.expiredAmong(chunk);
      expired.push(...chunk.filter((id) => refused.has(id)));
      const retryable = refused.size === 0 ? chunk : chunk.filter((id) => !refused.has(id));
      if (retryable.length === 0) return;
      const report = await this.store.requeueDead(retryable);
      requeued += report.requeued;
      resequenced += report.resequenced;
    };
    if (ids.length <= OUTBOX_ADMIN_MAX_LIMIT) {
      await requeue(ids);
      return { requeued, resequenced, expired };
    }
    // More than one transaction takes: requeued in queue order, not the caller's, or a later
    // dead message of a key listed in an earlier chunk would be moved to the end of its key
    // before an earlier one, and the two would swap places.
    const wanted = new Set(ids);
    const due: string[] = [];
    await this.forEachDeadPage({}, async (page) => {
      due.push(...page.filter((id) => wanted.has(id)));
      while (due.length >= OUTBOX_ADMIN_MAX_LIMIT)
        await requeue(due.splice(0, OUTBOX_ADMIN_MAX_LIMIT));
    });
    if (due.length > 0) await requeue(due);
    return { requeued, resequenced, expired };
  }

  /**
   * Retries every dead message matching `selection`, in queue order. `{ all: true }` retries
   * every dead letter; an empty filter or a field given as `undefined` is refused
   * ({@link OutboxAdminInputError}), so a missing parameter never widens the retry. Messages
   * that died of their type's expiry are refused and named in `expired`, as by `retry`.
   */
  async retryWhere(selection: OutboxDeadLetterSelection): Promise<OutboxRetryReport> {
    const filter = bulkFilterOf(selection);
    let requeued = 0;
    let resequenced = 0;
    const expired: string[] = [];
    await this.forEachDeadPage(filter, async (ids) => {
      const refused = await this.expiredAmong(ids);
      expired.push(...ids.filter((id) => refused.has(id)));
      const retryable = refused.size === 0 ? ids : ids.filter((id) => !refused.has(id));
      if (retryable.length === 0) return;
      const report = await this.store.requeueDead(retryable);
      requeued += report.requeued;
      resequenced += report.resequenced;
    });
    return { requeued, resequenced, expired };
  }

  /**
   * Of these message ids (at most a page), the dead ones that died of their type's expiry: their
   * last error is an `OutboxMessageExpiredError`, whether the claim found them expired or a retry
   * would have come due past it. Read from the row, so the `outbox` command, which knows no
   * policy, refuses them too.
   */
  private async expiredAmong(ids: readonly string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    // On the store's own connection where the port may be waiting on the app's transaction.
    if (this.store.expiredDead !== undefined) return new Set(await this.store.expiredDead(ids));
    const codec = await this.messageIds();
    const p = this.sql.params();
    // Bound in the order written: MySQL's and SQLite's placeholders are positional.
    const expiredError = p.add(`${OutboxMessageExpiredError.name}:%`);
    const matches = ids.map((id) => this.sql.messageIdIs(p, codec.param(id))).join(' OR ');
    const rows = await this.query<{ message_id: string | Uint8Array }>(
      `SELECT o.message_id FROM ${this.names.table} AS o WHERE o.status = 'dead' AND o.last_error LIKE ${expiredError} AND (${matches})`,
      p,
    );
    return new Set(rows.map((r) => messageIdText(r.message_id)));
  }

  /** Deletes these dead messages; their keys move on. Ids that are not dead are ignored. */
  async purge(messageIds: readonly string[]): Promise<number> {
    let deleted = 0;
    for (const ids of chunks(messageIdsOf(messageIds), OUTBOX_ADMIN_MAX_LIMIT)) {
      deleted += await this.store.deleteDead(ids);
    }
    return deleted;
  }

  /**
   * Deletes every dead message matching `selection`; their keys move on. `{ all: true }`
   * deletes every dead letter; an empty filter or a field given as `undefined` is refused
   * ({@link OutboxAdminInputError}), so a missing parameter never widens the purge.
   */
  async purgeWhere(selection: OutboxDeadLetterSelection): Promise<number> {
    const filter = bulkFilterOf(selection);
    let deleted = 0;
    await this.forEachDeadPage(filter, async (ids) => {
      deleted += await this.store.deleteDead(ids);
    });
    return deleted;
  }

  /**
   * Keys held up by their head: a dead head (with `onDeadLetter: 'block'`) or one backing off
   * after a failure, with undelivered messages queued behind it. Oldest head first. Always
   * empty when ordering is off.
   */
  async blockedKeys(page: OutboxPageRequest = {}): Promise<OutboxPage<OutboxBlockedKey>> {
    refuseUnknownAdminOptions('blockedKeys', page);
    const { after, limit } = pageOf(page);
    if (!this.ordered) return { items: [], nextCursor: null };
    const p = this.sql.params();
    const rows = await this.query<BlockedKeyRow>(
      this.sql.blockedKeys(this.names, p, this.queue, after, limit + 1),
      p,
    );
    return paged(rows, limit, toBlockedKey, (item) => item.headId);
  }

  /**
   * Pending messages whose lease expired without being settled (their dispatcher died or
   * stalled; the unlocker or the next claim takes them back), and with `leasedLongerThanMs`
   * those leased that long ago.
   */
  async stuckLeases(query: OutboxStuckLeaseQuery = {}): Promise<OutboxPage<OutboxStuckLease>> {
    refuseUnknownAdminOptions('stuckLeases', query);
    const { after, limit } = pageOf(query);
    const longer = query.leasedLongerThanMs ?? null;
    if (longer !== null && !(Number.isFinite(longer) && longer >= 0)) {
      throw invalid('leasedLongerThanMs', 'expected a number of milliseconds, 0 or more');
    }
    const p = this.sql.params();
    const rows = await this.query<StuckLeaseRow>(
      this.sql.stuckLeases(this.names, p, longer, after, limit + 1),
      p,
    );
    return paged(rows, limit, toStuckLease, (item) => item.id);
  }

  /**
   * The table's delivery partitions under `dispatcher.claims: 'partitions'` (docs/delivery.md,
   * "Partitions"; not the time partitions of a partitioned table): each dispatcher process with
   * its `instanceId`, heartbeat, share of the 256 and state, each partition's owner, generation
   * and last move, and the moves summed (the tables keep no history of moves). Where they are
   * not in use (another database than PostgreSQL, a table without schema step 9, or no
   * dispatcher delivering by partitions: the `'leases'` mode), says so and why.
   */
  async deliveryPartitions(): Promise<OutboxDeliveryPartitions> {
    return (await this.readDeliveryPartitions()).view;
  }

  /**
   * Who holds the delivery partitions: each owner with its share of the 256 and whether its
   * heartbeat holds, and the partitions no one holds (`owner: null`). Null where delivery
   * partitions are not in use.
   * @deprecated Use {@link deliveryPartitions}, which also says why they are not in use, and
   * gives each dispatcher's state and each partition's moves.
   */
  async partitionOwners(): Promise<readonly OutboxPartitionOwner[] | null> {
    const { view, owners } = await this.readDeliveryPartitions();
    return view.inUse ? owners : null;
  }

  private async readDeliveryPartitions(): Promise<{
    view: OutboxDeliveryPartitions;
    owners: readonly OutboxPartitionOwner[];
  }> {
    const partitions = this.store.deliveryPartitions;
    const reads = this.sql.deliveryPartitions;
    const table = this.names.table;
    if (partitions === undefined || reads === undefined) {
      const message = OutboxMessages.deliveryPartitionsOnlyPostgres(table, this.dialect);
      return { view: { inUse: false, reason: 'database', message }, owners: [] };
    }
    let read: [readonly OutboxPartitionOwner[], DeliveryPartitionRow[], DeliveryDispatcherRow[]];
    try {
      read = await Promise.all([
        partitions.owners(),
        this.query<DeliveryPartitionRow>(reads.partitions(this.names), this.sql.params()),
        this.query<DeliveryDispatcherRow>(reads.dispatchers(this.names), this.sql.params()),
      ]);
    } catch (error) {
      // No step 9 on this table (or an earlier 0.3 build's): nothing to show.
      const step = schemaStepOf('delivery-partitions');
      const message = OutboxMessages.deliveryPartitionsNoStep(table, describeError(error), step);
      return { view: { inUse: false, reason: 'schema', message }, owners: [] };
    }
    const [owners, partitionRows, dispatcherRows] = read;
    const view = summarizeDeliveryPartitions(owners, partitionRows, dispatcherRows);
    if (view !== null) return { view, owners };
    const message = OutboxMessages.deliveryPartitionsNoDispatcher(table, this.claimsGiven);
    return { view: { inUse: false, reason: 'no-dispatcher', message }, owners };
  }

  /**
   * The gauges a dashboard polls: counts by status and the age of the oldest pending message
   * (database clock). Cheaper than {@link counts}, which groups by topic and takes filters.
   */
  async stats(): Promise<OutboxStats & { readonly delivery: 'dispatcher' | 'external' }> {
    return { ...(await this.store.stats()), delivery: this.delivery };
  }

  /** Counts of the messages matching `filter` by state, in total and per topic. */
  async counts(filter: OutboxMessageFilter = {}): Promise<OutboxCounts> {
    checkFilter(filter, true, this.tenants);
    const p = this.sql.params();
    const rows = await this.query<{
      topic: string;
      status: string;
      leased: number | string;
      n: number | string;
    }>(this.sql.counts(this.names, this.where(p, filter, null)), p);
    const total = zero();
    const byTopic = new Map<string, ReturnType<typeof zero>>();
    for (const row of rows) {
      const n = Number(row.n);
      const state: keyof OutboxStatusCounts =
        Number(row.leased) === 1 ? 'leased' : (row.status as OutboxMessageStatus);
      let topic = byTopic.get(row.topic);
      if (topic === undefined) byTopic.set(row.topic, (topic = zero()));
      topic[state] += n;
      total[state] += n;
    }
    const topics: OutboxTopicCounts[] = [...byTopic]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([topic, counts]) => ({ topic, ...counts }));
    return { ...total, byTopic: topics };
  }

  /**
   * Per topic, the messages delivered and dead-lettered in the last `withinMs` (database clock)
   * and the age of the oldest pending or parked message, in topic order; topics with none of
   * these are left out. Reads only the rows settled within the window and the undelivered ones,
   * through their indexes, so a long delivered history costs nothing. Delivered rows the cleaner
   * already deleted (`deliveredRetentionMs` shorter than the window, or 0) are not counted.
   */
  async activity(withinMs: number): Promise<OutboxTopicActivity[]> {
    if (!(Number.isFinite(withinMs) && withinMs > 0)) {
      throw invalid('withinMs', 'expected a number of milliseconds, more than 0');
    }
    const p = this.sql.params();
    const rows = await this.query<{
      topic: string;
      kind: string;
      n: number | string;
      oldest_ms: number | string | null;
    }>(this.sql.activity(this.names, p, withinMs), p);
    const byTopic = new Map<string, { delivered: number; dead: number; oldest: number | null }>();
    for (const row of rows) {
      let topic = byTopic.get(row.topic);
      if (topic === undefined)
        byTopic.set(row.topic, (topic = { delivered: 0, dead: 0, oldest: null }));
      if (row.kind === 'delivered') topic.delivered += Number(row.n);
      else if (row.kind === 'dead') topic.dead += Number(row.n);
      else if (row.oldest_ms !== null) {
        // A clock step can make a just-written row look a moment younger than zero.
        const age = Math.max(0, Number(row.oldest_ms));
        topic.oldest = Math.max(topic.oldest ?? 0, age);
      }
    }
    return [...byTopic]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([topic, t]) => ({
        topic,
        delivered: t.delivered,
        dead: t.dead,
        oldestPendingAgeMs: t.oldest,
      }));
  }

  /**
   * Hands the message ids of the matching dead letters to `work`, a page at a time in queue
   * order. Rows written after the call began are left out (by an id bound), so a message that
   * `work` moves to the end of its key, and that fails again at once, is not taken twice.
   */
  private async forEachDeadPage(
    filter: OutboxDeadLetterFilter,
    work: (messageIds: string[]) => Promise<void>,
  ): Promise<void> {
    checkFilter(filter, false, this.tenants);
    const [top] = await this.query<{ id: string | null }>(
      this.sql.maxId(this.names),
      this.sql.params(),
    );
    const bound = top?.id ?? null;
    if (bound === null) return;
    let after: string | null = null;
    for (;;) {
      const p = this.sql.params();
      const where: string = [
        this.where(p, { ...filter, status: 'dead' }, after),
        this.sql.idAtMost(p, String(bound)),
      ].join(' AND ');
      const rows = await this.query<{ id: string | number; message_id: string | Uint8Array }>(
        `SELECT o.id, o.message_id FROM ${this.names.table} AS o WHERE ${where} ORDER BY ${this.sql.listOrder(true)} LIMIT ${p.add(OUTBOX_ADMIN_MAX_LIMIT)}`,
        p,
      );
      const last = rows[rows.length - 1];
      if (last === undefined) return;
      await work(rows.map((r) => messageIdText(r.message_id)));
      if (rows.length < OUTBOX_ADMIN_MAX_LIMIT) return;
      after = String(last.id);
    }
  }

  /**
   * The filter as fixed conditions over alias `o`, each value bound; `lane`, when given, in
   * place of the filter's key: the rows stored under exactly that key (or re-drive lane).
   */
  private where(
    p: SqlParams,
    filter: OutboxMessageFilter,
    after: string | null,
    lane?: string,
  ): string {
    const sql = this.sql;
    const conditions: string[] = [];
    const { status, topic, type, key, errorContains, createdBefore, createdAfter, olderThanMs } =
      filter;
    if (status !== undefined) {
      conditions.push(sql.statusIn(p, typeof status === 'string' ? [status] : [...status]));
    }
    if (topic !== undefined) conditions.push(`o.topic = ${p.add(topic)}`);
    if (type !== undefined) conditions.push(`o.event_type = ${p.add(type)}`);
    if (lane !== undefined) conditions.push(`o.message_key = ${p.add(lane)}`);
    else if (key === null) conditions.push('o.message_key IS NULL');
    // A key's messages, and its re-drive copies sent elsewhere, in their lanes of their own.
    else if (key !== undefined) conditions.push(storedKeyCondition(p, key));
    if (filter.tenant === null) conditions.push('o.tenant_id IS NULL');
    else if (filter.tenant !== undefined) conditions.push(`o.tenant_id = ${p.add(filter.tenant)}`);
    if (errorContains !== undefined) conditions.push(sql.errorContains(p, errorContains));
    if (createdBefore !== undefined) conditions.push(sql.createdBefore(p, createdBefore));
    if (createdAfter !== undefined) conditions.push(sql.createdAtOrAfter(p, createdAfter));
    if (olderThanMs !== undefined) conditions.push(sql.createdOlderThan(p, olderThanMs));
    if (after !== null) conditions.push(sql.idAfter(p, after));
    return conditions.length === 0 ? '1 = 1' : conditions.join(' AND ');
  }

  /** The `message_key` a message is stored under: its key, or its re-drive lane. */
  private async storedKeyOf(messageId: string): Promise<string | null> {
    const id = (await this.messageIds()).param(messageId);
    const p = this.sql.params();
    const [row] = await this.query<{ message_key: string | null }>(
      `SELECT o.message_key FROM ${this.names.table} AS o WHERE ${this.sql.messageIdIs(p, id)}`,
      p,
    );
    return row?.message_key ?? null;
  }

  /** How the table binds message ids: the store's (read at bootstrap), text where it has none. */
  private async messageIds(): Promise<MessageIdCodec> {
    return (await this.store.messageIdCodec?.()) ?? TEXT_MESSAGE_IDS;
  }

  private async query<R>(sql: string, p: SqlParams): Promise<R[]> {
    return (await this.sqlPort.query<R>(sql, p.values)).rows;
  }
}

/** A resolved policy as the admin API shows it (no functions). */
function policyViewOf(policy: ResolvedEventPolicy): OutboxPolicyView {
  const { maxAttempts, initialDelayMs, maxDelayMs, factor, jitter, maxAgeMs } = policy.retry;
  return {
    name: policy.name,
    retry: { maxAttempts, initialDelayMs, maxDelayMs, factor, jitter, maxAgeMs },
    onDeadLetter: policy.onDeadLetter,
    deliveredRetentionMs: policy.deliveredRetentionMs,
    deadRetentionMs: policy.deadRetentionMs,
    maxAgeMs: policy.maxAgeMs,
  };
}
