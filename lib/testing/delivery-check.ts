import { refuseUnknownTestingOptions } from './testing-option-keys';

/** A message your app committed, in commit order (a key's messages in the order they must arrive). */
export interface CommittedMessage {
  readonly messageId: string;
  /** Its ordering key; `null`: no order to keep. */
  readonly key: string | null;
}

/** One arrival at your consumer (or broker), in arrival order: a message arriving twice is listed twice. */
export interface ReceivedMessage {
  readonly messageId: string;
}

/** Messages that may arrive more than once, and why (the crash or cut that left them ambiguous). */
export interface AllowedDuplicates {
  readonly messageIds: Iterable<string>;
  readonly reason: string;
}

/** What `checkDelivery` compares. */
export interface DeliveryCheckInput {
  /** Every message committed, in commit order. */
  readonly committed: readonly CommittedMessage[];
  /** What reached the consumer, in arrival order, duplicates included. */
  readonly received: readonly ReceivedMessage[];
  /** Message ids enqueued in transactions that rolled back: none may arrive. @default [] */
  readonly rolledBack?: readonly string[];
  /** Messages that may arrive twice (at-least-once after a crash or a cut). @default [] */
  readonly allowedDuplicates?: readonly AllowedDuplicates[];
}

/** A message that arrived more than once. */
export interface DuplicatedMessage {
  readonly messageId: string;
  /** How many times it arrived. */
  readonly copies: number;
  /** Why that is allowed; `null`: it is not. */
  readonly reason: string | null;
}

/** A key whose messages first arrived in another order than their commit order. */
export interface OrderViolation {
  readonly key: string;
  /** The key's message ids in commit order (those that arrived). */
  readonly committed: readonly string[];
  /** The same messages in the order of their first arrival. */
  readonly arrived: readonly string[];
}

/** What `checkDelivery` found; `ok` when nothing is lost, duplicated without a reason, out of order or a ghost. */
export interface DeliveryReport {
  readonly ok: boolean;
  /** Committed, never arrived. */
  readonly lost: readonly string[];
  /** Arrived more than once, each with its reason or `null`. */
  readonly duplicated: readonly DuplicatedMessage[];
  readonly orderViolations: readonly OrderViolation[];
  /** Rolled back, yet arrived. */
  readonly ghosts: readonly string[];
  /** Arrived, but neither committed nor rolled back in this check (another test's message?). */
  readonly unknown: readonly string[];
}

/** How many times each message arrived. */
export function arrivalCounts(received: readonly ReceivedMessage[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const r of received) counts.set(r.messageId, (counts.get(r.messageId) ?? 0) + 1);
  return counts;
}

/** Per key (from `keyOf`), the message ids in the order of their first arrival. */
export function firstArrivalsByKey<K>(
  received: readonly ReceivedMessage[],
  keyOf: (messageId: string) => K | undefined,
): Map<K, string[]> {
  const seen = new Set<string>();
  const byKey = new Map<K, string[]>();
  for (const { messageId } of received) {
    if (seen.has(messageId)) continue;
    seen.add(messageId);
    const key = keyOf(messageId);
    if (key === undefined) continue;
    const list = byKey.get(key) ?? [];
    list.push(messageId);
    byKey.set(key, list);
  }
  return byKey;
}

/**
 * Compares what was committed with what arrived: lost messages, duplicates (allowed only where
 * `allowedDuplicates` names them), per-key order of first arrivals against commit order, and
 * ghosts (rolled back, yet delivered). A pure function: no test framework, no I/O.
 */
export function checkDelivery(input: DeliveryCheckInput): DeliveryReport {
  // `{ rolledback }` would otherwise check no ghost, and pass.
  refuseUnknownTestingOptions('checkDelivery()', input, {
    '': {
      committed: true,
      received: true,
      rolledBack: true,
      allowedDuplicates: true,
    } satisfies Record<keyof DeliveryCheckInput, true>,
  });
  const keys = new Map(input.committed.map((m) => [m.messageId, m.key]));
  const rolledBack = new Set(input.rolledBack ?? []);
  const counts = arrivalCounts(input.received);
  const reasons = new Map<string, string>();
  for (const allowed of input.allowedDuplicates ?? [])
    for (const id of allowed.messageIds) if (!reasons.has(id)) reasons.set(id, allowed.reason);

  const lost = input.committed.filter((m) => !counts.has(m.messageId)).map((m) => m.messageId);
  const duplicated = [...counts]
    .filter(([, copies]) => copies > 1)
    .map(([messageId, copies]) => ({ messageId, copies, reason: reasons.get(messageId) ?? null }));
  const ghosts = [...counts.keys()].filter((id) => rolledBack.has(id));
  const unknown = [...counts.keys()].filter((id) => !keys.has(id) && !rolledBack.has(id));

  const committedByKey = new Map<string, string[]>();
  for (const m of input.committed) {
    if (m.key === null || !counts.has(m.messageId)) continue;
    committedByKey.set(m.key, [...(committedByKey.get(m.key) ?? []), m.messageId]);
  }
  const arrivedByKey = firstArrivalsByKey(input.received, (id) => keys.get(id) ?? undefined);
  const orderViolations: OrderViolation[] = [];
  for (const [key, committed] of committedByKey) {
    const arrived = arrivedByKey.get(key) ?? [];
    if (arrived.some((id, i) => id !== committed[i]))
      orderViolations.push({ key, committed, arrived });
  }
  return {
    ok:
      lost.length === 0 &&
      ghosts.length === 0 &&
      orderViolations.length === 0 &&
      duplicated.every((d) => d.reason !== null),
    lost,
    duplicated,
    orderViolations,
    ghosts,
    unknown,
  };
}

const LISTED = 10;

function list(ids: readonly string[]): string {
  const more = ids.length > LISTED ? ` and ${ids.length - LISTED} more` : '';
  return `${ids.slice(0, LISTED).join(', ')}${more}`;
}

/** The report in a few lines, for a failure message: what went wrong, with the first ids of each. */
export function describeDeliveryReport(report: DeliveryReport): string {
  if (report.ok) {
    const allowed = report.duplicated.length;
    return allowed === 0
      ? 'delivered: nothing lost, no duplicate, order kept, no ghost'
      : `delivered: nothing lost, order kept, no ghost; ${allowed} allowed duplicate(s)`;
  }
  const lines: string[] = [];
  if (report.lost.length > 0) lines.push(`${report.lost.length} lost: ${list(report.lost)}`);
  const unexplained = report.duplicated.filter((d) => d.reason === null);
  if (unexplained.length > 0)
    lines.push(
      `${unexplained.length} duplicated with no crash or cut to explain it: ${list(unexplained.map((d) => `${d.messageId} ×${d.copies}`))}`,
    );
  for (const v of report.orderViolations.slice(0, LISTED))
    lines.push(
      `key ${v.key} out of order: committed ${list(v.committed)}; arrived ${list(v.arrived)}`,
    );
  if (report.orderViolations.length > LISTED)
    lines.push(`… and ${report.orderViolations.length - LISTED} more keys out of order`);
  if (report.ghosts.length > 0)
    lines.push(
      `${report.ghosts.length} ghost(s), rolled back yet delivered: ${list(report.ghosts)}`,
    );
  return lines.join('\n');
}

/** `checkDelivery`, throwing an `Error` that describes the report unless it is `ok`. */
export function assertDelivery(input: DeliveryCheckInput): DeliveryReport {
  const report = checkDelivery(input);
  if (!report.ok) throw new Error(`delivery check failed:\n${describeDeliveryReport(report)}`);
  return report;
}
