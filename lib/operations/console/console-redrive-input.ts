import type { OutboxRedriveFilter } from '../../module/admin/outbox-redrive.interfaces';
import { ConsoleInputError, text, type ConsoleParams } from './console-input';

/** The re-drive form's time fields, each the filter field of the same name. */
const TIMES = ['createdAfter', 'createdBefore', 'deliveredAfter', 'deliveredBefore'] as const;

/**
 * A time as typed: ISO text, or a browser's `datetime-local` value (no zone), taken as UTC as
 * the console shows every time.
 */
function instant(value: string, name: string): Date {
  const zoned = /(Z|[+-]\d{2}:?\d{2})$/i.test(value) ? value : `${value}Z`;
  const at = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}/.test(zoned) ? new Date(zoned) : new Date(NaN);
  if (Number.isNaN(at.getTime())) {
    throw new ConsoleInputError(
      `${name} must be a time such as 2026-11-27T10:00 (UTC), got ${JSON.stringify(value)}`,
    );
  }
  return at;
}

/** The re-drive filter fields of a query or form; only the fields given. */
export function redriveFilter(params: ConsoleParams): OutboxRedriveFilter {
  const filter: { -readonly [K in keyof OutboxRedriveFilter]: OutboxRedriveFilter[K] } = {};
  const topic = text(params, 'topic');
  const type = text(params, 'type');
  const key = text(params, 'key');
  if (topic !== undefined) filter.topic = topic;
  if (type !== undefined) filter.type = type;
  if (key !== undefined) filter.key = key;
  for (const name of TIMES) {
    const value = text(params, name);
    if (value !== undefined) filter[name] = instant(value, name);
  }
  return filter;
}

/** The filter back as parameters, for links and hidden fields (times as ISO text). */
export function redriveFilterParams(filter: OutboxRedriveFilter): [string, string][] {
  const out: [string, string][] = [];
  if (filter.topic !== undefined) out.push(['topic', filter.topic]);
  if (filter.type !== undefined) out.push(['type', filter.type]);
  if (typeof filter.key === 'string') out.push(['key', filter.key]);
  for (const name of TIMES) {
    const at = filter[name];
    if (at !== undefined) out.push([name, at.toISOString()]);
  }
  return out;
}

/** `rate` of the confirmation form: messages per second, or undefined for all at once. */
export function redriveRate(params: ConsoleParams): number | undefined {
  const value = text(params, 'rate');
  if (value === undefined) return undefined;
  const rate = Number(value);
  if (!/^[0-9]+(\.[0-9]+)?$/.test(value) || !(rate > 0) || rate > 1_000_000) {
    throw new ConsoleInputError(
      `rate must be a number of messages per second above 0, got ${JSON.stringify(value)}`,
    );
  }
  return rate;
}

/** What the operator typed in the confirmation form, kept when a re-drive is refused. */
export interface RedriveTyped {
  readonly reason?: string;
  readonly destination?: string;
  readonly rate?: string;
}

/** The confirmation form's typed fields, as given (checked where they are used). */
export function redriveTyped(params: ConsoleParams): RedriveTyped {
  const reason = text(params, 'reason');
  const destination = text(params, 'destination');
  const rate = text(params, 'rate');
  return {
    ...(reason === undefined ? {} : { reason }),
    ...(destination === undefined ? {} : { destination }),
    ...(rate === undefined ? {} : { rate }),
  };
}
