import { OutboxAdminInputError } from '../../errors/outbox-admin-input.error';
import { OutboxRedriveRefusedError } from '../../errors/outbox-redrive-refused.error';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { OutboxHeaders } from '../../message/outbox-message.interface';
import { UuidV7Generator } from '../../message/uuidv7';
import { OUTBOX_HEADER_REDRIVE_DELAY, OUTBOX_HEADER_SEQUENCE } from '../../outbox.constants';
import { OutboxMessages } from '../../outbox.messages';
import type { NewOutboxRow, OutboxEnqueuePort } from '../../store/ports/outbox-store.port';
import { writtenKeyedRows } from '../../store/shared-sql/key-sequence';
import {
  REDRIVE_LANE_KEY_HEADER,
  isRedriveLane,
  keyLaneOf,
  redriveLaneOf,
  shownKeyOf,
  storedKeyCondition,
} from '../../store/rows/redrive-lane';
import type { SqlPort } from '../../store/ports/sql-port';
import { messageIdText } from '../../store/rows/message-id-codec';
import { storedBytes, toDate } from '../../store/rows/outbox-row.mapper';
import type { AdminDialect } from '../../store/shared-sql/admin-dialect';
import type { OutboxAuditTableOptions } from '../../store/shared-sql/audit-table';
import type { SqlParams } from '../../store/shared-sql/sql-params';
import { OutboxAuditStore } from './outbox-audit.store';
import type { SubjectKeyVault } from '../../store/subject-key-vault';
import {
  redriveConfirmationCount,
  redriveConfirmationOf,
  type RedriveIdentity,
} from './redrive-confirmation';
import type {
  OutboxRedriveCandidate,
  OutboxRedriveFilter,
  OutboxRedriveOptions,
  OutboxRedrivePreview,
  OutboxRedrivePreviewOptions,
  OutboxRedriveRecord,
  OutboxRedriveReport,
} from './outbox-redrive.interfaces';

/** The header naming the message a re-drive copied. */
export const REDRIVE_OF_HEADER = 'x-outbox-redrive-of';
/** The header naming the re-drive that wrote a copy (its audit entry). */
export const REDRIVE_ID_HEADER = 'x-outbox-redrive-id';
/** The audit log's action of a re-drive. */
export const REDRIVE_ACTION = 'redrive';

const DEFAULT_MAX_COUNT = 10_000;
const MAX_MAX_COUNT = 1_000_000;
const DEFAULT_SAMPLE = 20;
/** Copies per transaction: one multi-row insert each, key locks held only that long. */
const CHUNK = 500;
const MAX_REASON = 500;
const MAX_ACTOR = 200;
/** The audit table's `target` column. */
const MAX_TARGET = 2_000;

/** A row a re-drive copies, as the drivers return it (see `AdminDialect.redriveColumns`). */
export interface RedriveRow {
  src: string;
  origin: number | string;
  message_id: string | Uint8Array;
  topic: string;
  message_key: string | null;
  event_type: string;
  payload: string;
  headers: string;
  payload_encoding: string;
  content_type: string | null;
  payload_bytes: string | Uint8Array | null;
  broker_attributes: string | null;
  created_at: Date | string;
  delivered_at: Date | string | null;
}

type Field<K extends keyof OutboxRedriveFilter> = {
  /** Undefined when the value is good, else what is wrong with it. */
  readonly problem: (value: NonNullable<OutboxRedriveFilter[K]> | null) => string | undefined;
  readonly condition: (
    sql: AdminDialect,
    p: SqlParams,
    value: NonNullable<OutboxRedriveFilter[K]> | null,
  ) => string;
};

const text = (value: unknown): string | undefined =>
  typeof value === 'string' && value !== '' ? undefined : 'expected a non-empty string';
const date = (value: unknown): string | undefined =>
  value instanceof Date && !Number.isNaN(value.getTime()) ? undefined : 'expected a valid Date';

/**
 * The filter's fields: how each is checked and which condition over the alias `o` it adds (the
 * outbox and its archive share these columns). A new field (a tenant, say) is one entry here
 * and one in `OutboxRedriveFilter`.
 */
const FIELDS: { readonly [K in keyof OutboxRedriveFilter]-?: Field<K> } = {
  topic: { problem: text, condition: (_s, p, v) => `o.topic = ${p.add(v)}` },
  key: {
    problem: (v) =>
      v === null || typeof v === 'string'
        ? undefined
        : 'expected a string, or null for messages without a key',
    // The key's messages, and its earlier copies sent elsewhere (in the key's re-drive lanes).
    condition: (_s, p, v) => (v === null ? 'o.message_key IS NULL' : storedKeyCondition(p, v)),
  },
  type: { problem: text, condition: (_s, p, v) => `o.event_type = ${p.add(v)}` },
  createdAfter: { problem: date, condition: (s, p, v) => s.createdAtOrAfter(p, v as Date) },
  createdBefore: { problem: date, condition: (s, p, v) => s.createdBefore(p, v as Date) },
  deliveredAfter: { problem: date, condition: (s, p, v) => s.deliveredAtOrAfter(p, v as Date) },
  deliveredBefore: { problem: date, condition: (s, p, v) => s.deliveredBefore(p, v as Date) },
};

const invalid = (what: string, problem: string): OutboxAdminInputError =>
  new OutboxAdminInputError(`Invalid ${what} for OutboxAdmin re-drive: ${problem}.`, what);

/** The filter's fields, checked: unknown, undefined, ill-typed and empty filters are refused. */
export function redriveFilterOf(
  filter: OutboxRedriveFilter,
): [keyof OutboxRedriveFilter, unknown][] {
  if (typeof filter !== 'object' || filter === null) {
    throw invalid('filter', 'expected an object such as { topic: "orders", createdAfter: date }');
  }
  const fields = Object.entries(filter) as [keyof OutboxRedriveFilter, unknown][];
  for (const [name, value] of fields) {
    if (!Object.hasOwn(FIELDS, name)) {
      throw invalid(
        `filter field "${String(name)}"`,
        `not a re-drive filter field (use ${Object.keys(FIELDS).join(', ')})`,
      );
    }
    if (value === undefined) {
      throw invalid(
        `filter field "${name}"`,
        'it is present but undefined, which would widen the re-drive; leave it out',
      );
    }
    const problem = (FIELDS[name].problem as (v: unknown) => string | undefined)(value);
    if (problem !== undefined) throw invalid(`filter ${name}`, problem);
  }
  if (fields.length === 0) {
    throw invalid(
      'filter',
      'an empty filter would re-drive every delivered message; name a topic, key, type or time range',
    );
  }
  const { createdAfter, createdBefore, deliveredAfter, deliveredBefore } = filter;
  for (const [from, to, name] of [
    [createdAfter, createdBefore, 'created'],
    [deliveredAfter, deliveredBefore, 'delivered'],
  ] as const) {
    if (from !== undefined && to !== undefined && from.getTime() >= to.getTime()) {
      throw invalid(`filter ${name} range`, `${name}After must be before ${name}Before`);
    }
  }
  return fields;
}

/** The filter as the audit log keeps it: times as ISO text. */
function filterRecord(filter: OutboxRedriveFilter): Record<string, string | null> {
  const out: Record<string, string | null> = {};
  for (const [name, value] of Object.entries(filter) as [string, unknown][]) {
    out[name] = value instanceof Date ? value.toISOString() : (value as string | null);
  }
  return out;
}

/** A lane as used by the copies to one topic. */
const laneUse = (topic: string, lane: string): string => `${topic}\n${lane}`;

/** A selected row's key and headers as users see them (a re-drive lane's key, not the lane). */
export function shownOf(row: RedriveRow): { key: string | null; headers: OutboxHeaders } {
  const headers = JSON.parse(row.headers) as OutboxHeaders;
  return isRedriveLane(row.message_key)
    ? shownKeyOf(row.message_key, headers)
    : { key: row.message_key, headers };
}

function toCandidate(row: RedriveRow): OutboxRedriveCandidate {
  return {
    source: row.src === 'archive' ? 'archive' : 'outbox',
    id: String(row.origin),
    messageId: messageIdText(row.message_id),
    topic: row.topic,
    key: shownOf(row).key,
    type: row.event_type,
    createdAt: toDate(row.created_at),
    deliveredAt: row.delivered_at === null ? null : toDate(row.delivered_at),
  };
}

function positiveInteger(value: number, name: string, max: number): number {
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw invalid(name, `expected an integer from 1 to ${max}, got ${String(value)}`);
  }
  return value;
}

/** The re-drive target of the audit log: JSON, refused when the column cannot hold it. */
function auditTarget(record: Omit<OutboxRedriveRecord, 'at' | 'actor' | 'count'>): string {
  const target = JSON.stringify({
    id: record.redriveId,
    reason: record.reason,
    filter: record.filter,
    to: record.destination,
    rate: record.ratePerSecond,
  });
  if (target.length > MAX_TARGET) {
    throw invalid(
      'reason',
      `the reason and filter take ${target.length} characters in the audit log, which keeps ${MAX_TARGET}; shorten the reason`,
    );
  }
  return target;
}

function parseRecord(entry: {
  at: Date;
  actor: string;
  target: string;
  affected: number;
}): OutboxRedriveRecord | null {
  try {
    const t = JSON.parse(entry.target) as {
      id?: unknown;
      reason?: unknown;
      filter?: unknown;
      to?: unknown;
      rate?: unknown;
    };
    if (typeof t.id !== 'string') return null;
    return {
      redriveId: t.id,
      at: entry.at,
      actor: entry.actor,
      reason: typeof t.reason === 'string' ? t.reason : '',
      filter:
        typeof t.filter === 'object' && t.filter !== null
          ? (t.filter as Record<string, string | null>)
          : {},
      destination: typeof t.to === 'string' ? t.to : null,
      ratePerSecond: typeof t.rate === 'number' ? t.rate : null,
      count: entry.affected,
    };
  } catch {
    return null;
  }
}

/** What the re-drive needs of the admin that owns it. */
export interface RedriveContext {
  readonly sqlPort: SqlPort;
  readonly store: OutboxEnqueuePort;
  readonly sql: AdminDialect;
  readonly names: OutboxTableNames;
  /** Writers of a key are serialised at insert (the app's ordering). */
  readonly ordered: boolean;
  /** Enqueue numbers each key's messages (`ordering.sequence`): copies take new numbers too. */
  readonly sequence: boolean;
  /**
   * Copies sent to another topic go in their key's re-drive lane (rows/redrive-lane.ts); not
   * where an external engine delivers, which reads `message_key` as the key and has no lanes.
   */
  readonly lanes: boolean;
  /** `<table>_archive` is searched too. */
  readonly archive: boolean;
  readonly auditTable: OutboxAuditTableOptions | undefined;
  /** The erasure's key vault: copies of sealed messages are recorded as its keys' uses. */
  readonly vault?: SubjectKeyVault;
}

/**
 * Re-drives of delivered messages (see `OutboxAdmin.redrive`): selects them from the outbox
 * (and its archive), and writes a copy of each through the store's insert, as enqueue does.
 */
export class OutboxRedriver {
  private readonly ids = new UuidV7Generator();

  constructor(private readonly context: RedriveContext) {}

  async preview(
    filter: OutboxRedriveFilter,
    options: OutboxRedrivePreviewOptions = {},
  ): Promise<OutboxRedrivePreview> {
    const sample = positiveInteger(options.sampleSize ?? DEFAULT_SAMPLE, 'sampleSize', 100);
    const maxCount = positiveInteger(
      options.maxCount ?? DEFAULT_MAX_COUNT,
      'maxCount',
      MAX_MAX_COUNT,
    );
    const fields = redriveFilterOf(filter);
    // One statement reads the set the confirmation stands for; counted apart only past
    // maxCount, where no re-drive could send it anyway.
    const identities = await this.identities(fields, maxCount + 1);
    const within = identities.length <= maxCount;
    let count = identities.length;
    if (!within) {
      const p = this.context.sql.params();
      const [row] = await this.query<{ n: number | string }>(
        `SELECT count(*) AS n FROM (${this.selection(p, fields)}) AS r`,
        p,
      );
      count = Number(row?.n ?? 0);
    }
    const rows = await this.rows(fields, sample);
    return {
      count,
      sample: rows.map(toCandidate),
      includesArchive: this.context.archive,
      confirmation: within && count > 0 ? redriveConfirmationOf(identities) : null,
      maxCount,
    };
  }

  async redrive(
    filter: OutboxRedriveFilter,
    options: OutboxRedriveOptions,
  ): Promise<OutboxRedriveReport> {
    const fields = redriveFilterOf(filter);
    const { actor, reason, destination, ratePerSecond, expected } = options ?? {};
    if (typeof actor !== 'string' || actor.trim() === '' || actor.length > MAX_ACTOR) {
      throw invalid('actor', `expected who re-drives, 1 to ${MAX_ACTOR} characters`);
    }
    if (typeof reason !== 'string' || reason.trim() === '' || reason.length > MAX_REASON) {
      throw invalid('reason', `expected why, 1 to ${MAX_REASON} characters`);
    }
    if (destination !== undefined && text(destination) !== undefined) {
      throw invalid('destination', 'expected a topic name (a non-empty string)');
    }
    if (
      ratePerSecond !== undefined &&
      !(Number.isFinite(ratePerSecond) && ratePerSecond > 0 && ratePerSecond <= 1_000_000)
    ) {
      throw invalid('ratePerSecond', 'expected a number of messages per second above 0');
    }
    const expectedCount = expected === undefined ? undefined : redriveConfirmationCount(expected);
    if (expected !== undefined && expectedCount === undefined) {
      throw invalid(
        'expected',
        "expected the confirmation previewRedrive() gave (such as '2-9f3c…')",
      );
    }
    const maxCount = positiveInteger(
      options.maxCount ?? DEFAULT_MAX_COUNT,
      'maxCount',
      MAX_MAX_COUNT,
    );
    const redriveId = this.ids.next();
    const target = auditTarget({
      redriveId,
      reason: reason.trim(),
      filter: filterRecord(filter),
      destination: destination ?? null,
      ratePerSecond: ratePerSecond ?? null,
    });
    const audit = new OutboxAuditStore(
      this.context.sqlPort,
      options.auditTable ?? this.context.auditTable,
    );
    await audit.probeOrRefuse(OutboxMessages.redriveNoAuditTable);

    // One statement reads the whole selection: its count is exact at one moment, and what is
    // delivered or cleaned afterwards changes nothing that is sent.
    const rows = await this.rows(fields, maxCount + 1);
    if (rows.length > maxCount) {
      throw new OutboxRedriveRefusedError(
        OutboxMessages.redriveTooMany(maxCount),
        'too-many',
        maxCount,
        null,
      );
    }
    // The rows read are the rows copied: what is sent is exactly the set confirmed, or nothing.
    if (expectedCount !== undefined && redriveConfirmationOf(rows) !== expected) {
      throw new OutboxRedriveRefusedError(
        OutboxMessages.redriveSelectionChanged(expectedCount, rows.length),
        'selection-changed',
        expectedCount,
        rows.length,
      );
    }
    if (rows.length === 0) {
      throw new OutboxRedriveRefusedError(
        OutboxMessages.redriveEmpty(),
        'empty',
        expectedCount ?? null,
        0,
      );
    }

    const oldLanes = await this.oldLanesInUse(rows, destination);
    const copies = rows.map((row, i) =>
      this.copyOf(row, i, redriveId, destination, ratePerSecond, oldLanes),
    );
    for (let start = 0; start < copies.length; start += CHUNK) {
      const chunk = copies.slice(start, start + CHUNK).map((c) => c.row);
      await this.context.sqlPort.transaction(async (tx) => {
        // Recorded with the first copies, in their transaction: no copy goes out unaudited, and
        // a re-drive refused by the database leaves no entry.
        if (start === 0) {
          await audit.record(
            {
              actor: actor.trim(),
              action: REDRIVE_ACTION,
              scope: 'filter',
              target,
              confirmed: rows.length,
              affected: rows.length,
            },
            tx,
          );
        }
        const duplicates = await this.context.store.insert(tx, chunk, this.context.ordered);
        // A sealed copy sent to another topic is a use of its data key there: an erasure
        // notice must reach that topic too.
        await this.context.vault?.recordCopies(
          tx,
          copies.slice(start, start + CHUNK).map((c) => ({ ...c.row, key: c.key })),
        );
        if (this.context.sequence) {
          // Numbered by their key, a copy in a re-drive lane too: per destination and key.
          const keyed = copies.slice(start, start + CHUNK).map((c) => ({ ...c.row, key: c.key }));
          await this.context.store.numberKeys(tx, writtenKeyedRows(keyed, duplicates));
        }
      });
    }
    return {
      redriveId,
      count: copies.length,
      destination: destination ?? null,
      ratePerSecond: ratePerSecond ?? null,
    };
  }

  /** The past re-drives, newest first, from the audit log. */
  async records(
    limit: number,
    auditTable: OutboxAuditTableOptions | undefined,
  ): Promise<OutboxRedriveRecord[]> {
    positiveInteger(limit, 'limit', 1_000);
    const audit = new OutboxAuditStore(this.context.sqlPort, auditTable ?? this.context.auditTable);
    const entries = await audit.recent(limit, REDRIVE_ACTION);
    return entries.flatMap((entry) => {
      const record = parseRecord(entry);
      return record === null ? [] : [record];
    });
  }

  private copyOf(
    row: RedriveRow,
    index: number,
    redriveId: string,
    destination: string | undefined,
    rate: number | undefined,
    oldLanes: ReadonlySet<string>,
  ): { row: NewOutboxRow; key: string | null } {
    // The original's number belongs to its first delivery: a copy is a new message of its key,
    // numbered like any enqueue when the instance numbers keys, unnumbered otherwise.
    const shown = shownOf(row);
    const {
      [OUTBOX_HEADER_SEQUENCE]: _sequence,
      [OUTBOX_HEADER_REDRIVE_DELAY]: _delay,
      ...headers
    } = shown.headers;
    const topic = destination ?? row.topic;
    // To its own topic a copy queues where its original did (the key's lane, or the lane of
    // the copies it belongs to); to another, in the lane of its destination and key, never
    // before or behind the key's live messages nor its copies to other topics (ARCHITECTURE.md,
    // "Re-drive lanes"), unless an older build's lane of the key still holds copies to that
    // topic: behind those.
    const lane =
      shown.key !== null && topic !== row.topic && this.context.lanes
        ? oldLanes.has(laneUse(topic, keyLaneOf(shown.key)))
          ? keyLaneOf(shown.key)
          : redriveLaneOf(topic, shown.key)
        : row.message_key;
    const binary = row.payload_encoding === 'binary';
    const delayMs = rate === undefined ? 0 : Math.round((index * 1000) / rate);
    const copy: NewOutboxRow = {
      messageId: this.ids.next(),
      topic,
      key: lane,
      type: row.event_type,
      payload: row.payload,
      headers: JSON.stringify({
        ...headers,
        ...(isRedriveLane(lane) ? { [REDRIVE_LANE_KEY_HEADER]: shown.key } : {}),
        [REDRIVE_OF_HEADER]: messageIdText(row.message_id),
        [REDRIVE_ID_HEADER]: redriveId,
        // The copy's age counts from when it falls due (see the claim's row mapper), or a type's
        // maxAgeMs would dead-letter the later copies of a slow spread unpublished.
        ...(delayMs > 0 ? { [OUTBOX_HEADER_REDRIVE_DELAY]: String(delayMs) } : {}),
      }),
      ...(binary
        ? {
            binary: { bytes: storedBytes(row.payload_bytes), contentType: row.content_type ?? '' },
          }
        : {}),
      ...(row.broker_attributes === null || row.broker_attributes === ''
        ? {}
        : { attributes: row.broker_attributes }),
      availableAt: null,
      delayMs: rate === undefined ? null : delayMs,
    };
    return { row: copy, key: shown.key };
  }

  /**
   * The lanes of older builds (one per key, whatever the destination: `keyLaneOf`) that still
   * hold undelivered copies, with their topics (`laneUse`), among those of the keys these rows'
   * copies to another topic would have used. A copy joins such a lane rather than its own, so
   * that it does not overtake the copies an older build wrote to the same topic.
   */
  private async oldLanesInUse(
    rows: readonly RedriveRow[],
    destination: string | undefined,
  ): Promise<Set<string>> {
    const lanes = new Set<string>();
    if (!this.context.lanes) return lanes;
    for (const row of rows) {
      const { key } = shownOf(row);
      if (key !== null && (destination ?? row.topic) !== row.topic) lanes.add(keyLaneOf(key));
    }
    const found = new Set<string>();
    const all = [...lanes];
    for (let start = 0; start < all.length; start += CHUNK) {
      const p = this.context.sql.params();
      const list = all
        .slice(start, start + CHUNK)
        .map((lane) => p.add(lane))
        .join(', ');
      const held = await this.query<{ message_key: string; topic: string }>(
        `SELECT DISTINCT o.message_key, o.topic FROM ${this.context.names.table} AS o
WHERE o.message_key IN (${list}) AND o.message_key IS NOT NULL AND o.status <> 'delivered'`,
        p,
      );
      for (const row of held) found.add(laneUse(row.topic, row.message_key));
    }
    return found;
  }

  /** The selected rows in queue order (original row id), at most `limit`. */
  private async rows(
    fields: [keyof OutboxRedriveFilter, unknown][],
    limit: number,
  ): Promise<RedriveRow[]> {
    const p = this.context.sql.params();
    const selection = this.selection(p, fields);
    return this.query<RedriveRow>(
      `SELECT * FROM (${selection}) AS r ORDER BY r.origin LIMIT ${p.add(limit)}`,
      p,
    );
  }

  /** The identities of the selected rows in queue order, at most `limit` (see `preview`). */
  private async identities(
    fields: [keyof OutboxRedriveFilter, unknown][],
    limit: number,
  ): Promise<RedriveIdentity[]> {
    const p = this.context.sql.params();
    const selection = this.selection(p, fields, (origin) => `${origin} AS origin, o.message_id`);
    return this.query<RedriveIdentity>(
      `SELECT r.src, r.origin, r.message_id FROM (${selection}) AS r ORDER BY r.origin LIMIT ${p.add(limit)}`,
      p,
    );
  }

  /**
   * The delivered rows matching `fields`, of the outbox and (with the archive) of its archive,
   * with `columns` (by default every column a copy needs).
   */
  private selection(
    p: SqlParams,
    fields: [keyof OutboxRedriveFilter, unknown][],
    columns: (origin: 'o.id' | 'o.outbox_id') => string = (origin) =>
      this.context.sql.redriveColumns(origin),
  ): string {
    const { sql, names, archive } = this.context;
    const part = (table: string, src: string, origin: 'o.id' | 'o.outbox_id'): string => {
      const conditions = [
        `o.status = 'delivered'`,
        ...fields.map(([name, value]) =>
          (FIELDS[name].condition as (s: AdminDialect, p: SqlParams, v: unknown) => string)(
            sql,
            p,
            value,
          ),
        ),
      ];
      return `SELECT '${src}' AS src, ${columns(origin)} FROM ${table} AS o WHERE ${conditions.join(' AND ')}`;
    };
    const outbox = part(names.table, 'outbox', 'o.id');
    return archive
      ? `${outbox}\nUNION ALL\n${part(names.archiveTable, 'archive', 'o.outbox_id')}`
      : outbox;
  }

  private async query<R>(statement: string, p: SqlParams): Promise<R[]> {
    return (await this.context.sqlPort.query<R>(statement, p.values)).rows;
  }
}
