import type { OutboxHeaders } from '../../message/outbox-message.interface';
import { parseBrokerAttributes } from '../../message/broker-attributes';
import { storedBytes, toDate } from '../../store/rows/outbox-row.mapper';
import { messageIdText } from '../../store/rows/message-id-codec';
import { isRedriveLane, shownKeyOf } from '../../store/rows/redrive-lane';
import type {
  OutboxAttempt,
  OutboxAttemptOutcome,
  OutboxBlockedKey,
  OutboxMessageDetail,
  OutboxMessageStatus,
  OutboxMessageSummary,
  OutboxStuckLease,
} from './outbox-admin.interfaces';

type Time = Date | string | null;
type Num = number | string;

/** The summary columns as the drivers return them. */
export interface AdminRow {
  id: Num;
  /** The text, or the 16 bytes of a MySQL BINARY(16) column (see message-id-codec.ts). */
  message_id: string | Uint8Array;
  topic: string;
  message_key: string | null;
  event_type: string;
  status: string;
  attempts: Num;
  last_error: string | null;
  last_attempt_at: Time;
  available_at: Time;
  created_at: Time;
  delivered_at: Time;
  dead_at: Time;
  locked_by: string | null;
  locked_until: Time;
  age_ms: Num;
  /** JSON text: where `message_key` is a re-drive lane, the key is here (rows/redrive-lane.ts). */
  headers: string;
  /** Selected only with the `tenants` option on. */
  tenant_id?: string | null;
}

export interface AdminDetailRow extends AdminRow {
  payload: string;
  lock_token: string | null;
  payload_encoding: string;
  content_type: string | null;
  payload_bytes: string | Uint8Array | null;
  broker_attributes: string | null;
}

/** An attempt-history row as the drivers return it. */
export interface AttemptRow {
  attempt: Num;
  outcome: string;
  locked_by: string | null;
  error_class: string | null;
  error: string | null;
  failed_at: Date | string;
}

export interface StuckLeaseRow extends AdminRow {
  lease_expired: Num;
  leased_ms: Num | null;
}

export interface BlockedKeyRow {
  message_key: string;
  /** The head's headers (JSON text), which name a re-drive lane's key. */
  head_headers: string;
  head_id: Num;
  head_message_id: string | Uint8Array;
  head_status: string;
  attempts: Num;
  last_error: string | null;
  available_at: Time;
  waiting: Num;
  oldest_waiting_ms: Num | null;
}

const optionalDate = (value: Time): Date | null => (value === null ? null : toDate(value));
const wholeMs = (value: Num | null): number => Math.max(0, Math.round(Number(value ?? 0)));

/** A row's key and headers as users see them: a re-drive lane's key, its header left out. */
function shown(row: { message_key: string | null; headers: string }): {
  key: string | null;
  headers: () => OutboxHeaders;
} {
  const parse = (): OutboxHeaders => JSON.parse(row.headers) as OutboxHeaders;
  if (!isRedriveLane(row.message_key)) return { key: row.message_key, headers: parse };
  const lane = shownKeyOf(row.message_key, parse());
  return { key: lane.key, headers: () => lane.headers };
}

export function toSummary(row: AdminRow): OutboxMessageSummary {
  return {
    id: String(row.id),
    messageId: messageIdText(row.message_id),
    topic: row.topic,
    key: shown(row).key,
    type: row.event_type,
    status: row.status as OutboxMessageStatus,
    attempts: Number(row.attempts),
    lastError: row.last_error,
    lastAttemptAt: optionalDate(row.last_attempt_at),
    availableAt: toDate(row.available_at ?? new Date(0)),
    createdAt: toDate(row.created_at ?? new Date(0)),
    deliveredAt: optionalDate(row.delivered_at),
    deadAt: optionalDate(row.dead_at),
    lockedBy: row.locked_by,
    lockedUntil: optionalDate(row.locked_until),
    ageMs: wholeMs(row.age_ms),
    ...(row.tenant_id === undefined ? {} : { tenant: row.tenant_id }),
  };
}

export function toDetail(
  row: AdminDetailRow,
  attempts: readonly AttemptRow[],
): Omit<OutboxMessageDetail, 'policy'> {
  return {
    ...toSummary(row),
    payload: row.payload,
    encoding: row.payload_encoding === 'binary' ? 'binary' : 'json',
    contentType: row.payload_encoding === 'binary' ? row.content_type : null,
    payloadBytes: row.payload_encoding === 'binary' ? storedBytes(row.payload_bytes) : null,
    attributes: parseBrokerAttributes(row.broker_attributes) ?? null,
    headers: shown(row).headers(),
    lockToken: row.lock_token,
    attemptHistory: attempts.map(toAttempt),
  };
}

function toAttempt(row: AttemptRow): OutboxAttempt {
  return {
    attempt: Number(row.attempt),
    outcome: row.outcome as OutboxAttemptOutcome,
    failedAt: toDate(row.failed_at),
    lockedBy: row.locked_by,
    errorClass: row.error_class,
    error: row.error,
  };
}

export function toStuckLease(row: StuckLeaseRow): OutboxStuckLease {
  return {
    ...toSummary(row),
    leaseExpired: Number(row.lease_expired) === 1,
    leasedForMs: wholeMs(row.leased_ms),
  };
}

export function toBlockedKey(row: BlockedKeyRow): OutboxBlockedKey {
  const dead = row.head_status === 'dead';
  return {
    key: isRedriveLane(row.message_key)
      ? shownKeyOf(row.message_key, JSON.parse(row.head_headers) as OutboxHeaders).key
      : row.message_key,
    headId: String(row.head_id),
    headMessageId: messageIdText(row.head_message_id),
    headStatus: dead ? 'dead' : 'retrying',
    headAttempts: Number(row.attempts),
    lastError: row.last_error,
    nextAttemptAt: dead ? null : optionalDate(row.available_at),
    waiting: Number(row.waiting),
    oldestWaitingAgeMs: wholeMs(row.oldest_waiting_ms),
  };
}
