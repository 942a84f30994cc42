import { Logger } from '@nestjs/common';
import { DispatcherLog } from '../../lib/dispatch/dispatcher-log';
import { ShutdownHold, type ShutdownHoldParts } from '../../lib/dispatch/pipeline/shutdown-hold';
import { ownerToken } from '../../lib/store/shared-sql/owner-leases';

// The hold of a batch whose publish did not answer the shutdown's abort (ShutdownHold), on a
// fake clock: its rows move to a token of their own that names no owner lock (so no takeover
// shortens it), leased for leaseMs and renewed while the call runs; a move that fails keeps the
// claim's token (the pipeline then keeps the owner lock); renewals that fail are said once.

class Lines extends Logger {
  readonly lines: string[] = [];
  override warn(message: unknown): void {
    this.lines.push(`warn ${String(message)}`);
  }
  override debug(): void {}
}

const LEASE_MS = 3_000;
const INTERVAL_MS = 1_000;
const CLAIM_TOKEN = ownerToken(0x1234);

interface Call {
  readonly sentAt: number;
  readonly token: string;
  readonly leaseMs: number;
  readonly newToken: string | undefined;
}

function setup(answer: (call: number) => Promise<number>, intervalMs: number | undefined) {
  const logger = new Lines();
  const calls: Call[] = [];
  let changes = 0;
  const parts: ShutdownHoldParts = {
    renew: (_ids, token, leaseMs, newToken) => {
      calls.push({ sentAt: performance.now(), token, leaseMs, newToken });
      return answer(calls.length);
    },
    leaseMs: LEASE_MS,
    intervalMs,
    log: new DispatcherLog(logger, 'default', 'abcd0123'),
    onChange: () => (changes += 1),
  };
  // The claim's lease ends 500 ms from now.
  const hold = new ShutdownHold(parts, CLAIM_TOKEN, ['1', '2'], performance.now() + 500);
  return { hold, calls, logger, changes: () => changes };
}

describe('ShutdownHold (a publish deaf to the shutdown abort)', () => {
  beforeEach(() => jest.useFakeTimers({ now: 0 }));
  afterEach(() => jest.useRealTimers());

  it('moves the rows to a plain token of their own for leaseMs, keeping the batch name, and renews it while the call runs', async () => {
    const { hold, calls, changes } = setup(() => Promise.resolve(2), INTERVAL_MS);
    expect(hold.onClaimToken).toBe(true);
    await hold.moved;
    const [move] = calls;
    expect(move).toMatchObject({ token: CLAIM_TOKEN, leaseMs: LEASE_MS });
    // A version-4 UUID (no owner lock's key: never taken over), ending as the claim's token.
    expect(move?.newToken).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-/);
    expect(move?.newToken?.slice(-8)).toBe(CLAIM_TOKEN.slice(-8));
    expect(hold.token).toBe(move?.newToken);
    expect(hold.onClaimToken).toBe(false);
    expect(hold.leaseEnd).toBe(LEASE_MS);
    expect(changes()).toBe(1);
    expect(hold.describe()).toMatch(
      /its messages stay leased until about \S+, renewed while the call runs/,
    );

    await jest.advanceTimersByTimeAsync(2 * INTERVAL_MS + 10);
    expect(calls.slice(1).map((c) => [c.sentAt, c.token, c.newToken])).toEqual([
      [INTERVAL_MS, hold.token, undefined],
      [2 * INTERVAL_MS, hold.token, undefined],
    ]);
    expect(hold.leaseEnd).toBe(2 * INTERVAL_MS + LEASE_MS);

    // The call returned: no renewal after that.
    hold.stop();
    await jest.advanceTimersByTimeAsync(10 * LEASE_MS);
    expect(calls).toHaveLength(3);
  });

  it('without lease renewal, holds for leaseMs once', async () => {
    const { hold, calls } = setup(() => Promise.resolve(2), undefined);
    await hold.moved;
    await jest.advanceTimersByTimeAsync(10 * LEASE_MS);
    expect(calls).toHaveLength(1);
    expect(hold.leaseEnd).toBe(LEASE_MS);
    expect(hold.describe()).not.toMatch(/renewed/);
  });

  it('keeps the claim token when the move fails, and says the owner lock is kept', async () => {
    const { hold, changes } = setup(
      () => Promise.reject(new Error('connection refused')),
      INTERVAL_MS,
    );
    await hold.moved;
    expect(hold.token).toBe(CLAIM_TOKEN);
    expect(hold.onClaimToken).toBe(true);
    expect(hold.leaseEnd).toBe(500);
    expect(changes()).toBe(1);
    expect(hold.describe()).toMatch(
      /its lease could not be moved \(Error: connection refused\).*the owner lock is kept while the call runs/,
    );
  });

  it('says nothing is held when the rows had left the lease already', async () => {
    const { hold } = setup(() => Promise.resolve(0), INTERVAL_MS);
    await hold.moved;
    expect(hold.onClaimToken).toBe(false);
    expect(hold.describe()).toMatch(/its messages had left its lease already/);
  });

  it('says once that renewals fail (the database closed), and keeps trying while the call runs', async () => {
    const { hold, calls, logger } = setup(
      (call) => (call === 1 ? Promise.resolve(2) : Promise.reject(new Error('not connected'))),
      INTERVAL_MS,
    );
    await hold.moved;
    await jest.advanceTimersByTimeAsync(INTERVAL_MS + 1_000);
    expect(calls.length).toBeGreaterThan(3);
    expect(logger.lines.filter((l) => l.includes('Renewing the lease'))).toHaveLength(1);
    // The lease's end stays where the last renewal that landed left it.
    expect(hold.leaseEnd).toBe(LEASE_MS);
    hold.stop();
  });
});
