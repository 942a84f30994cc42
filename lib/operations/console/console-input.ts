import type {
  OutboxDeadLetterFilter,
  OutboxMessageFilter,
  OutboxMessageStatus,
} from '../../module/admin/outbox-admin.interfaces';

import { MAX_REFRESH_SECONDS, MIN_REFRESH_SECONDS } from './console.options';
import type { PageRefresh } from './views/layout.view';

/** A query or form value the console refuses: answered with 400 and this reason. */
export class ConsoleInputError extends Error {
  override readonly name = 'ConsoleInputError';
}

/** Query strings and url-encoded forms as the adapters parse them. */
export type ConsoleParams = Readonly<Record<string, unknown>>;

export const STATUSES: readonly OutboxMessageStatus[] = ['dead', 'pending', 'waiting', 'delivered'];
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const CURSOR = /^[0-9]{1,19}$/;
const MINUTE = 60_000;

/** One string value, or undefined when absent or blank; a repeated parameter is refused. */
export function text(params: ConsoleParams, name: string): string | undefined {
  const value = params[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') throw new ConsoleInputError(`${name} was given more than once`);
  const trimmed = value.trim();
  if (trimmed.length > 500) throw new ConsoleInputError(`${name} is longer than 500 characters`);
  return trimmed === '' ? undefined : trimmed;
}

/** Values of a field that may repeat (`id=…&id=…`). */
export function list(params: ConsoleParams, name: string): string[] {
  const value = params[name];
  if (value === undefined || value === null || value === '') return [];
  const values: unknown[] = Array.isArray(value) ? value : [value];
  if (values.some((v) => typeof v !== 'string')) throw new ConsoleInputError(`${name} is not text`);
  return values as string[];
}

function minutes(params: ConsoleParams, name: string): number | undefined {
  const value = text(params, name);
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!/^[0-9]+(\.[0-9]+)?$/.test(value) || !Number.isFinite(n) || n > 5_256_000) {
    throw new ConsoleInputError(
      `${name} must be a number of minutes, 0 or more (got ${JSON.stringify(value)})`,
    );
  }
  return n;
}

/** Whether `value` is a message id (a UUID), as a link to a message's page needs. */
export function isMessageId(value: string): boolean {
  return UUID.test(value);
}

export function uuid(value: string | undefined, name = 'id'): string {
  if (value === undefined || !UUID.test(value)) {
    throw new ConsoleInputError(
      `${name} must be a message id (a UUID), got ${JSON.stringify(value ?? '')}`,
    );
  }
  return value.toLowerCase();
}

export function cursor(params: ConsoleParams): string | null {
  const after = text(params, 'after');
  if (after === undefined) return null;
  if (!CURSOR.test(after))
    throw new ConsoleInputError(
      `after must be a cursor from a "next page" link, got ${JSON.stringify(after)}`,
    );
  return after;
}

export function status(params: ConsoleParams): OutboxMessageStatus {
  const value = text(params, 'status') ?? 'dead';
  if (!STATUSES.includes(value as OutboxMessageStatus)) {
    throw new ConsoleInputError(
      `status must be one of ${STATUSES.join(', ')}, got ${JSON.stringify(value)}`,
    );
  }
  return value as OutboxMessageStatus;
}

/**
 * The dead-letter filter fields of a query or form: topic, type, key, error, olderThanMinutes,
 * tenant (with the module's `tenants` option).
 */
export function deadLetterFilter(params: ConsoleParams): OutboxDeadLetterFilter {
  const topic = text(params, 'topic');
  const type = text(params, 'type');
  const key = text(params, 'key');
  const errorContains = text(params, 'error');
  const older = minutes(params, 'olderThanMinutes');
  const tenant = text(params, 'tenant');
  // Only the fields given: an absent one must not reach the admin API as undefined.
  return {
    ...(topic === undefined ? {} : { topic }),
    ...(type === undefined ? {} : { type }),
    ...(key === undefined ? {} : { key }),
    ...(errorContains === undefined ? {} : { errorContains }),
    ...(older === undefined ? {} : { olderThanMs: Math.round(older * MINUTE) }),
    ...(tenant === undefined ? {} : { tenant }),
  };
}

export function messageFilter(params: ConsoleParams): OutboxMessageFilter {
  return { status: status(params), ...deadLetterFilter(params) };
}

/** The filter back as query parameters, for links and hidden form fields. */
export function filterParams(filter: OutboxDeadLetterFilter): [string, string][] {
  const out: [string, string][] = [];
  if (filter.topic !== undefined) out.push(['topic', filter.topic]);
  if (filter.type !== undefined) out.push(['type', filter.type]);
  if (typeof filter.key === 'string') out.push(['key', filter.key]);
  if (filter.errorContains !== undefined) out.push(['error', filter.errorContains]);
  if (filter.olderThanMs !== undefined)
    out.push(['olderThanMinutes', String(filter.olderThanMs / MINUTE)]);
  if (typeof filter.tenant === 'string') out.push(['tenant', filter.tenant]);
  return out;
}

/** The filter in words, for confirmation pages and the audit log. */
export function describeFilter(filter: OutboxDeadLetterFilter): string {
  const parts = filterParams(filter).map(([k, v]) => `${k}=${JSON.stringify(v)}`);
  return parts.length === 0 ? 'every dead letter' : parts.join(' ');
}

export function minutesParam(params: ConsoleParams, name: string): number | undefined {
  return minutes(params, name);
}

/**
 * A GET page's reload interval, `?refresh=` (seconds; 0 for never) or else the option, and the
 * page's other query parameters, which its Refresh control sends again.
 */
export function pageRefresh(url: string | undefined, fallback: number): PageRefresh {
  const parsed = new URL(url ?? '/', 'http://console.invalid');
  const given = parsed.searchParams.getAll('refresh');
  if (given.length > 1) throw new ConsoleInputError('refresh was given more than once');
  const value = given[0]?.trim() ?? '';
  let seconds = fallback;
  if (value !== '') {
    seconds = /^[0-9]{1,4}$/.test(value) ? Number(value) : NaN;
    if (!(seconds === 0 || (seconds >= MIN_REFRESH_SECONDS && seconds <= MAX_REFRESH_SECONDS))) {
      throw new ConsoleInputError(
        `refresh must be 0 (off) or ${MIN_REFRESH_SECONDS} to ${MAX_REFRESH_SECONDS} seconds, got ${JSON.stringify(value)}`,
      );
    }
  }
  return {
    seconds,
    path: parsed.pathname,
    params: [...parsed.searchParams].filter(([name]) => name !== 'refresh'),
  };
}
