import type { DispatcherLog } from '../../lib/dispatch/dispatcher-log';
import { OwnerLiveness } from '../../lib/dispatch/leases/owner-liveness';
import type { OutboxDeliveryPort } from '../../lib/store/ports/outbox-store.port';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { ownerHex } from '../../lib/store/shared-sql/owner-leases';
import { FakeLockSession } from '../support/fake-lock-session';

function liveness(others: () => readonly string[] = () => []) {
  const sessions: FakeLockSession[] = [];
  const keys: number[] = [];
  const warnings: string[] = [];
  let wakes = 0;
  const sql = {
    session: () => {
      const session = new FakeLockSession();
      sessions.push(session);
      return Promise.resolve(session.asSession());
    },
  } as unknown as SqlPort;
  const store = {
    lockOwner: (_session: unknown, key: number) => {
      keys.push(key);
      return Promise.resolve(true);
    },
    unlockOwner: (session: FakeLockSession) => {
      session.unlocked = true;
      return Promise.resolve();
    },
    enterLeasesMode: () => Promise.resolve(others()),
    shortenOrphanedLeases: () => Promise.resolve(0),
  } as unknown as OutboxDeliveryPort;
  const log = {
    warn: (line: string) => warnings.push(line),
    log: () => undefined,
  } as unknown as DispatcherLog;
  const owner = new OwnerLiveness(sql, store, log, () => wakes++);
  return { owner, sessions, keys, warnings, wakes: () => wakes };
}

describe("OwnerLiveness (the 'leases' mode's owner lock)", () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('names its lock in lease tokens for as long as the session answers', async () => {
    const { owner, keys } = liveness();
    await owner.start();
    const lease = owner.lease();
    expect(lease.token.startsWith(ownerHex(keys[0] as number))).toBe(true);
    // Well past the first answer's validity: only renewed answers keep it counting.
    await jest.advanceTimersByTimeAsync(3_000);
    expect(owner.holds(lease.fence as AbortSignal)).toBe(true);
    expect(owner.lease().fence).toBe(lease.fence);
    expect(keys).toHaveLength(1);
    await owner.stop();
  });

  it('fences what was leased under a lost session, closes it, says so, and leases under a new key', async () => {
    const { owner, sessions, keys, warnings } = liveness();
    await owner.start();
    const lease = owner.lease();
    (sessions[0] as FakeLockSession).answer = 'fail';
    await jest.advanceTimersByTimeAsync(300);
    expect(lease.fence?.aborted).toBe(true);
    expect(owner.holds(lease.fence as AbortSignal)).toBe(false);
    expect(sessions[0]?.released).toBe(true);
    expect(warnings.some((w) => w.startsWith("Lost the owner lock's database session"))).toBe(true);
    await jest.advanceTimersByTimeAsync(300);
    expect(keys).toHaveLength(2);
    expect(keys[1]).not.toBe(keys[0]);
    expect(owner.lease().token.startsWith(ownerHex(keys[1] as number))).toBe(true);
    await owner.stop();
  });

  it('stops counting a second after the last answer when the session hangs, with no timer run', async () => {
    const { owner, sessions } = liveness();
    await owner.start();
    const lease = owner.lease();
    const fence = lease.fence as AbortSignal;
    (sessions[0] as FakeLockSession).answer = 'hang';
    // The clock moves but no timer fires: a process held up.
    jest.setSystemTime(Date.now() + 1_100);
    const now = performance.now();
    jest.spyOn(performance, 'now').mockReturnValue(now + 1_100);
    expect(owner.holds(fence)).toBe(false);
    expect(fence.aborted).toBe(true);
    jest.restoreAllMocks();
    await owner.stop();
  });

  it('keeps its lock through shutdown unwatched, then unlocks it and pools its session', async () => {
    const { owner, sessions } = liveness();
    await owner.start();
    const fence = owner.lease().fence as AbortSignal;
    owner.stopWatching();
    (sessions[0] as FakeLockSession).answer = 'hang';
    await jest.advanceTimersByTimeAsync(5_000);
    expect(owner.holds(fence)).toBe(true);
    expect(fence.aborted).toBe(false);
    await owner.stop();
    expect(fence.aborted).toBe(true);
    expect(sessions[0]?.unlocked).toBe(true);
    expect(sessions[0]?.released).toBe(false);
  });

  it("claims nothing while 'partitions' dispatchers deliver from the table, and wakes the claims once they are gone", async () => {
    let others: readonly string[] = ['host-1 (pid 42)'];
    const { owner, wakes } = liveness(() => others);
    await owner.start();
    expect(owner.delivers).toBe(false);
    others = [];
    await jest.advanceTimersByTimeAsync(300);
    expect(owner.delivers).toBe(true);
    expect(wakes()).toBe(1);
    await owner.stop();
  });
});
