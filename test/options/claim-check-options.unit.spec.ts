import { DataSource } from 'typeorm';
import { OutboxOptionsError, type OutboxModuleOptions, type OutboxPublisher } from '../../lib';
import { OUTBOX_HEADER_CLAIM_CHECK_ID, tableClaimCheckStore } from '../../lib/claim-check';
import { markClaimChecks } from '../../lib/message/claim-check-mark';
import type { NewOutboxRow } from '../../lib/message/new-outbox-row';
import { resolveOutboxOptions } from '../../lib/options/resolve-outbox-options';

// The claim check's options (checked at bootstrap) and its decision at enqueue (pure).

const publisher: OutboxPublisher = {
  publish: (messages) => Promise.resolve(messages.map(() => ({ ok: true as const }))),
};
const dataSource = new DataSource({ type: 'better-sqlite3', database: ':memory:' });
const store = tableClaimCheckStore();
const base: OutboxModuleOptions = { dataSource, publisher };

function errorOf(options: OutboxModuleOptions): OutboxOptionsError {
  try {
    resolveOutboxOptions(options);
  } catch (error) {
    if (error instanceof OutboxOptionsError) return error;
    throw error;
  }
  throw new Error('resolved without an error');
}

function row(type: string, payload: string, headers = '{}'): NewOutboxRow {
  return {
    messageId: `0190a0a0-0000-7000-8000-${String(payload.length).padStart(12, '0')}`,
    topic: 'orders',
    key: null,
    type,
    payload,
    headers,
    availableAt: null,
    delayMs: null,
  };
}

describe('claimCheck options', () => {
  it('resolves the module threshold and each type’s own, null for a type that never claim-checks', () => {
    const resolved = resolveOutboxOptions({
      ...base,
      claimCheck: { store, thresholdBytes: 1_000 },
      policies: {
        'a.big': { claimCheckThresholdBytes: 10 },
        'a.never': { claimCheckThresholdBytes: null },
        'a.other': { maxAgeMs: 5 },
      },
    });
    const { thresholdFor } = resolved.claimCheck!;
    expect([
      thresholdFor('a.big'),
      thresholdFor('a.never'),
      thresholdFor('a.other'),
      thresholdFor('x'),
    ]).toEqual([10, null, 1_000, 1_000]);
    expect(
      resolveOutboxOptions({ ...base, claimCheck: { store } }).claimCheck?.thresholdBytes,
    ).toBe(65_536);
    expect(resolveOutboxOptions(base).claimCheck).toBeNull();
  });

  it.each([
    [{ claimCheck: { store: {} } }, 'claimCheck.store', /not a claim-check store/],
    [{ claimCheck: { store, thresholdBytes: -1 } }, 'claimCheck.thresholdBytes', /whole number/],
    [
      { claimCheck: { store, treshold: 1 } },
      'claimCheck.treshold',
      /Known options here: claimCheck.store/,
    ],
    [
      { claimCheck: { store }, cleaner: { deliveredRetentionMs: 0 } },
      'cleaner.deliveredRetentionMs',
      /before a consumer could fetch/,
    ],
    [
      {
        claimCheck: { store },
        cleaner: { deliveredRetentionMs: 60_000 },
        policies: { t: { deliveredRetentionMs: 0 } },
      },
      'policies["t"].deliveredRetentionMs',
      /before a consumer could fetch/,
    ],
    [
      { policies: { t: { claimCheckThresholdBytes: 5 } } },
      'policies["t"].claimCheckThresholdBytes',
      /claimCheck option is not/,
    ],
    [
      { claimCheck: { store }, publisher: undefined, delivery: 'external' },
      'claimCheck',
      /external/,
    ],
  ] as const)('refuses %j at %s', (extra, option, message) => {
    const error = errorOf({ ...base, ...(extra as Partial<OutboxModuleOptions>) });
    expect(error.option).toBe(option);
    expect(error.message).toMatch(message);
  });

  it('marks at enqueue a payload over its type’s threshold with its own id, and nothing else', () => {
    const thresholdFor = (type: string): number | null => (type === 'never' ? null : 100);
    const [small, big, multibyte, never, binary] = markClaimChecks(
      [
        row('t', 'x'.repeat(100)),
        row('t', 'x'.repeat(101), '{"a":"b"}'),
        // 40 characters, 120 bytes of UTF-8: the size is in bytes.
        row('t', '€'.repeat(40)),
        row('never', 'x'.repeat(500)),
        {
          ...row('t', 'null'),
          binary: { bytes: Buffer.alloc(101), contentType: 'application/pdf' },
        },
      ],
      thresholdFor,
    );
    expect(small?.headers).toBe('{}');
    expect(JSON.parse(big?.headers ?? '')).toEqual({
      a: 'b',
      [OUTBOX_HEADER_CLAIM_CHECK_ID]: big?.messageId,
    });
    expect(JSON.parse(multibyte?.headers ?? '')).toEqual({
      [OUTBOX_HEADER_CLAIM_CHECK_ID]: multibyte?.messageId,
    });
    expect(never?.headers).toBe('{}');
    expect(JSON.parse(binary?.headers ?? '')).toEqual({
      [OUTBOX_HEADER_CLAIM_CHECK_ID]: binary?.messageId,
    });
    expect(big?.payload).toBe('x'.repeat(101));
  });
});
