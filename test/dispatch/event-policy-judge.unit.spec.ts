import { OutboxMessageExpiredError } from '../../lib/errors/outbox-message-expired.error';
import {
  judgeBatch,
  planBatch,
  withFallbacks,
  type PolicyOf,
  type PublishResult,
  type RecordPolicy,
  type RetryPolicy,
} from '../../lib/dispatch/pipeline/batch-outcome';
import type { ClaimedRecord } from '../../lib/store/ports/outbox-store.port';

const RETRY: RetryPolicy = {
  maxAttempts: 5,
  initialDelayMs: 100,
  maxDelayMs: 1_000,
  factor: 2,
  jitter: 0,
  maxAgeMs: 0,
  retryIf: undefined,
};
const DEFAULT: RecordPolicy = {
  name: 'default',
  retry: RETRY,
  deadAdvancesKey: false,
  maxAgeMs: 0,
};
const PAYMENT: RecordPolicy = {
  name: 'payment.captured',
  retry: { ...RETRY, maxAttempts: 2 },
  deadAdvancesKey: false,
  maxAgeMs: 0,
};
const CACHE: RecordPolicy = {
  name: 'cache.invalidate',
  retry: { ...RETRY, maxAttempts: 1 },
  deadAdvancesKey: true,
  maxAgeMs: 1_000,
};
const policyOf: PolicyOf = (r) =>
  r.type === PAYMENT.name ? PAYMENT : r.type === CACHE.name ? CACHE : DEFAULT;

function rec(
  id: string,
  type: string,
  {
    attempts = 1,
    key = `k${id}`,
    ageMs = 0,
  }: { attempts?: number; key?: string | null; ageMs?: number } = {},
): ClaimedRecord {
  return {
    id,
    messageId: `m${id}`,
    topic: 't',
    key,
    type,
    payload: '{}',
    headers: {},
    attempts,
    createdAt: new Date(0),
    ageMs,
  };
}

const boom = new Error('boom');
const failed = (n: number): PublishResult => ({
  kind: 'outcomes',
  outcomes: Array.from({ length: n }, () => ({ ok: false as const, error: boom })),
});

function judge(records: ClaimedRecord[], result: PublishResult) {
  return judgeBatch({
    records,
    result,
    retry: RETRY,
    deadAdvancesKey: false,
    policyOf,
    outagePauseMs: 1_000,
    probeEveryMs: undefined,
    heldReleaseMs: 100,
  });
}

describe('judging under per-event-type policies', () => {
  it("applies each type's maxAttempts: the second failure kills a payment, not a default message", () => {
    const records = [
      rec('1', 'payment.captured', { attempts: 2 }),
      rec('2', 'other', { attempts: 2 }),
    ];
    const { verdicts } = judge(records, failed(2));
    expect(verdicts.map((v) => v.kind)).toEqual(['dead', 'retry']);
  });

  it("advances a dead message's key only where its type's onDeadLetter is 'skip'", () => {
    const records = [
      rec('1', 'cache.invalidate', { key: 'a' }),
      rec('2', 'payment.captured', { key: 'b', attempts: 2 }),
    ];
    const { settlement } = judge(records, failed(2));
    expect(settlement.dead.map((d) => d.id)).toEqual(['1', '2']);
    expect(settlement.advancedKeys).toEqual(['a']);
  });

  it('dead-letters an expired message unpublished, with reason expired, and holds its run behind it', () => {
    const records = [
      rec('1', 'cache.invalidate', { key: 'a', ageMs: 1_500 }),
      rec('2', 'cache.invalidate', { key: 'a', ageMs: 10 }),
      rec('3', 'other', { key: 'b', ageMs: 5_000 }),
    ];
    const plan = planBatch(records, RETRY.maxAttempts, 0, 1_000, policyOf);
    expect(plan.fresh.map((r) => r.id)).toEqual(['2', '3']);
    expect([...plan.held]).toEqual(['2']);
    // The publisher saw only record 3 (2 was held back unsent).
    const { verdicts, settlement } = judge(records, {
      kind: 'outcomes',
      outcomes: [undefined, { ok: true }],
    });
    expect(verdicts.map((v) => v.kind)).toEqual(['dead', 'release', 'delivered']);
    const dead = verdicts[0];
    expect(dead?.kind === 'dead' && dead.error).toBeInstanceOf(OutboxMessageExpiredError);
    expect(settlement.dead[0]?.errorClass).toBe('OutboxMessageExpiredError');
    expect(settlement.dead[0]?.error).toMatch(
      /^OutboxMessageExpiredError: expired: not delivered within 1000 ms/,
    );
  });

  it('dead-letters at once a retry whose next attempt would come past the expiry', () => {
    const expiring: RecordPolicy = { ...CACHE, retry: { ...RETRY, maxAttempts: 10 } };
    const { verdicts } = judgeBatch({
      records: [
        rec('1', 'cache.invalidate', { ageMs: 950 }),
        rec('2', 'cache.invalidate', { ageMs: 100 }),
      ],
      result: failed(2),
      retry: RETRY,
      deadAdvancesKey: false,
      policyOf: () => expiring,
      outagePauseMs: 1_000,
      probeEveryMs: undefined,
      heldReleaseMs: 100,
    });
    expect(verdicts.map((v) => v.kind)).toEqual(['dead', 'retry']);
    const first = verdicts[0];
    expect(first?.kind === 'dead' && (first.error as OutboxMessageExpiredError).lastFailure).toBe(
      boom,
    );
  });

  it('without a policy lookup, judges as before: the module retry for all, no expiry', () => {
    const { verdicts } = judgeBatch({
      records: [rec('1', 'cache.invalidate', { attempts: 2, ageMs: 99_999 })],
      result: failed(1),
      retry: RETRY,
      deadAdvancesKey: false,
      outagePauseMs: 1_000,
      probeEveryMs: undefined,
      heldReleaseMs: 100,
    });
    expect(verdicts.map((v) => v.kind)).toEqual(['retry']);
  });

  it("applies the fallbacks' answers: settled is delivered and frees its key, declined and failed stay dead with a note", () => {
    const records = [
      rec('1', 'payment.captured', { key: 'a', attempts: 2 }),
      rec('2', 'payment.captured', { key: 'b', attempts: 2 }),
      rec('3', 'payment.captured', { key: 'c', attempts: 2 }),
      rec('4', 'other', { key: 'd', attempts: 1 }),
    ];
    const judged = judge(records, failed(4));
    expect(judged.verdicts.map((v) => v.kind)).toEqual(['dead', 'dead', 'dead', 'retry']);
    const after = withFallbacks(
      judged,
      new Map([
        [0, { kind: 'settled', fallback: 'F.refund' }],
        [1, { kind: 'declined', fallback: 'F.refund' }],
        [2, { kind: 'failed', fallback: 'F.refund', error: new TypeError('down') }],
        // An answer for a record that is not dead changes nothing.
        [3, { kind: 'settled', fallback: 'F.refund' }],
      ]),
    );
    expect(after.verdicts.map((v) => v.kind)).toEqual(['delivered', 'dead', 'dead', 'retry']);
    expect(after.settlement.delivered).toEqual(['1']);
    // The settled one is also a 'fallback' row of the attempt history: which fallback, after what.
    expect(after.settlement.fallback).toEqual([
      { id: '1', errorClass: 'Error', error: 'fallback F.refund settled it after: Error: boom' },
    ]);
    expect(after.settlement.advancedKeys).toEqual(['a']);
    expect(after.settlement.dead).toEqual([
      { id: '2', errorClass: 'Error', error: 'Error: boom; fallback F.refund declined' },
      {
        id: '3',
        errorClass: 'Error',
        error: 'Error: boom; fallback F.refund failed: TypeError: down',
      },
    ]);
    expect(after.settlement.retry.map((r) => r.id)).toEqual(['4']);
    // No answer: the judgement as it was, with no fallback rows.
    expect(withFallbacks(judged, new Map())).toBe(judged);
    expect(judged.settlement.fallback).toBeUndefined();
  });
});
