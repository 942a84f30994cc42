import { SettleCoalescer } from '../../lib/dispatch/partitions/settle-coalescer';
import type {
  OwnedSettle,
  PartitionFence,
  Settlement,
} from '../../lib/store/ports/outbox-store.port';

/** A settlement delivering `ids`, advancing `key`. */
const delivering = (ids: string[], key: string): Settlement => ({
  delivered: ids,
  retry: [],
  dead: [],
  release: [],
  advancedKeys: [key],
});

interface Statement {
  readonly fence: PartitionFence;
  readonly settlement: Settlement;
  readonly token: string;
  answer(settle: OwnedSettle): void;
  fail(error: unknown): void;
}

/** A store whose statements wait until the test answers them. */
function heldStore(): { statements: Statement[]; coalescer: SettleCoalescer } {
  const statements: Statement[] = [];
  const coalescer = new SettleCoalescer(
    (fence, settlement, token) =>
      new Promise<OwnedSettle>((resolve, reject) => {
        statements.push({ fence, settlement, token, answer: resolve, fail: reject });
      }),
  );
  return { statements, coalescer };
}

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('SettleCoalescer', () => {
  it('writes the settles that arrive while one statement runs in the next one, fenced by all their partitions', async () => {
    const { statements, coalescer } = heldStore();
    const first = coalescer.settle(new Map([[1, '5']]), delivering(['1'], 'a'));
    await tick();
    const second = coalescer.settle(new Map([[2, '7']]), delivering(['2', '3'], 'b'));
    const third = coalescer.settle(new Map([[3, '9']]), delivering(['4'], 'c'));
    await tick();
    expect(statements).toHaveLength(1);
    statements[0]?.answer({ changed: 1, promoted: 0 });
    await expect(first).resolves.toEqual({ changed: 1, promoted: 0 });
    await tick();
    expect(statements).toHaveLength(2);
    const merged = statements[1] as Statement;
    expect([...merged.fence]).toEqual([
      [2, '7'],
      [3, '9'],
    ]);
    expect(merged.settlement.delivered).toEqual(['2', '3', '4']);
    expect(merged.settlement.advancedKeys).toEqual(['b', 'c']);
    merged.answer({ changed: 3, promoted: 2 });
    await expect(second).resolves.toEqual({ changed: 2, promoted: 2 });
    await expect(third).resolves.toEqual({ changed: 1, promoted: 0 });
  });

  it('tells every batch of a statement refused in part that it changed nothing known', async () => {
    const { statements, coalescer } = heldStore();
    const first = coalescer.settle(new Map([[1, '5']]), delivering(['1'], 'a'));
    const second = coalescer.settle(new Map([[2, '7']]), delivering(['2'], 'b'));
    const third = coalescer.settle(new Map([[3, '9']]), delivering(['3'], 'c'));
    await tick();
    statements[0]?.answer({ changed: 1, promoted: 0 });
    await first;
    await tick();
    // Partition 3 moved on: one of the two rows changed.
    statements[1]?.answer({ changed: 1, promoted: 0 });
    await expect(second).resolves.toEqual({ changed: 0, promoted: 0 });
    await expect(third).resolves.toEqual({ changed: 0, promoted: 0 });
  });

  it('puts a batch of a partition under another generation in a statement of its own', async () => {
    const { statements, coalescer } = heldStore();
    const first = coalescer.settle(new Map([[1, '5']]), delivering(['1'], 'a'));
    const older = coalescer.settle(new Map([[2, '7']]), delivering(['2'], 'b'));
    const newer = coalescer.settle(new Map([[2, '8']]), delivering(['3'], 'c'));
    await tick();
    statements[0]?.answer({ changed: 1, promoted: 0 });
    await first;
    await tick();
    expect(statements).toHaveLength(2);
    expect([...(statements[1]?.fence ?? [])]).toEqual([[2, '7']]);
    statements[1]?.answer({ changed: 1, promoted: 0 });
    await expect(older).resolves.toEqual({ changed: 1, promoted: 0 });
    await tick();
    expect([...(statements[2]?.fence ?? [])]).toEqual([[2, '8']]);
    statements[2]?.answer({ changed: 0, promoted: 0 });
    await expect(newer).resolves.toEqual({ changed: 0, promoted: 0 });
  });

  it("fails every batch of a failed statement; each tries again alone, under that statement's token", async () => {
    const { statements, coalescer } = heldStore();
    const first = coalescer.settle(new Map([[1, '5']]), delivering(['1'], 'a'));
    const a = delivering(['2'], 'b');
    const b = delivering(['3'], 'c');
    const second = coalescer.settle(new Map([[2, '7']]), a);
    const third = coalescer.settle(new Map([[3, '9']]), b);
    await tick();
    statements[0]?.answer({ changed: 1, promoted: 0 });
    await first;
    await tick();
    const failed = statements[1] as Statement;
    failed.fail(new Error('connection reset'));
    await expect(second).rejects.toThrow('connection reset');
    await expect(third).rejects.toThrow('connection reset');
    const again = coalescer.settle(new Map([[2, '7']]), a);
    await tick();
    const retry = statements[2] as Statement;
    expect(retry.settlement).toBe(a);
    expect(retry.token).toBe(failed.token);
    retry.answer({ changed: 1, promoted: 0 });
    await expect(again).resolves.toEqual({ changed: 1, promoted: 0 });
  });
});
