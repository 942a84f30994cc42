import { assertDelivery, checkDelivery, describeDeliveryReport } from '../../lib/testing';

// The fault kit's delivery checker (nestjs-outbox/testing): what it calls lost, duplicated,
// out of order and ghost, from a commit list and an arrival list.

const committed = [
  { messageId: 'a1', key: 'a' },
  { messageId: 'b1', key: 'b' },
  { messageId: 'a2', key: 'a' },
  { messageId: 'n1', key: null },
  { messageId: 'a3', key: 'a' },
];
const arrivals = (...ids: string[]) => ids.map((messageId) => ({ messageId }));

describe('checkDelivery', () => {
  it('passes every message once in per-key commit order, keys interleaved, unkeyed anywhere', () => {
    const report = checkDelivery({
      committed,
      received: arrivals('n1', 'a1', 'a2', 'b1', 'a3'),
    });
    expect(report).toEqual({
      ok: true,
      lost: [],
      duplicated: [],
      orderViolations: [],
      ghosts: [],
      unknown: [],
    });
    expect(describeDeliveryReport(report)).toBe(
      'delivered: nothing lost, no duplicate, order kept, no ghost',
    );
  });

  it('reports a lost message, and judges the order of what arrived', () => {
    const report = checkDelivery({ committed, received: arrivals('a1', 'b1', 'a3', 'n1') });
    expect(report.ok).toBe(false);
    expect(report.lost).toEqual(['a2']);
    expect(report.orderViolations).toEqual([]);
    expect(describeDeliveryReport(report)).toBe('1 lost: a2');
  });

  it('allows a duplicate only where a reason names it, and orders by first arrival', () => {
    // a1 published, its dispatcher killed before the settle, a1 published again by the next
    // one before a2: what a crash may cause. b1's second copy has no such reason.
    const received = arrivals('a1', 'b1', 'a1', 'a2', 'n1', 'a3', 'b1');
    const allowed = checkDelivery({
      committed,
      received,
      allowedDuplicates: [{ messageIds: ['a1'], reason: 'dispatcher killed' }],
    });
    expect(allowed.ok).toBe(false);
    expect(allowed.duplicated).toEqual([
      { messageId: 'a1', copies: 2, reason: 'dispatcher killed' },
      { messageId: 'b1', copies: 2, reason: null },
    ]);
    expect(describeDeliveryReport(allowed)).toBe(
      '1 duplicated with no crash or cut to explain it: b1 ×2',
    );
    expect(
      checkDelivery({
        committed,
        received,
        allowedDuplicates: [{ messageIds: ['a1', 'b1'], reason: 'broker cut' }],
      }).ok,
    ).toBe(true);
  });

  it('reports a key whose messages first arrived out of commit order, even once re-sent in order', () => {
    const report = checkDelivery({
      committed,
      received: arrivals('a2', 'a1', 'a2', 'b1', 'n1', 'a3'),
      allowedDuplicates: [{ messageIds: ['a2'], reason: 'retried' }],
    });
    expect(report.orderViolations).toEqual([
      { key: 'a', committed: ['a1', 'a2', 'a3'], arrived: ['a2', 'a1', 'a3'] },
    ]);
    expect(() =>
      assertDelivery({
        committed,
        received: arrivals('a2', 'a1', 'b1', 'n1', 'a3'),
      }),
    ).toThrow('key a out of order: committed a1, a2, a3; arrived a2, a1, a3');
  });

  it('reports a rolled-back message that arrived as a ghost, and a stranger as unknown', () => {
    const report = checkDelivery({
      committed,
      rolledBack: ['r1', 'r2'],
      received: arrivals('a1', 'b1', 'r2', 'a2', 'n1', 'a3', 'x9'),
    });
    expect(report.ok).toBe(false);
    expect(report.ghosts).toEqual(['r2']);
    expect(report.unknown).toEqual(['x9']);
    expect(describeDeliveryReport(report)).toBe('1 ghost(s), rolled back yet delivered: r2');
  });
});
