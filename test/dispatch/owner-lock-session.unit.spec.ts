import {
  OwnerLockSession,
  Repeating,
  type OwnerLockLapse,
} from '../../lib/dispatch/owner-lock-session';
import { FakeLockSession } from '../support/fake-lock-session';

function lockSession(unlock: (session: FakeLockSession) => Promise<void>) {
  const sessions: FakeLockSession[] = [];
  const lapses: OwnerLockLapse[] = [];
  let failSession: Error | undefined;
  const locks = new OwnerLockSession({
    session: () => {
      if (failSession !== undefined) return Promise.reject(failSession);
      const session = new FakeLockSession();
      sessions.push(session);
      return Promise.resolve(session.asSession());
    },
    lock: () => Promise.resolve(true),
    unlock: (session) => unlock(session as unknown as FakeLockSession),
    lapsed: (_lock, why) => lapses.push(why),
  });
  return {
    locks,
    sessions,
    lapses,
    failSessions: (error: Error | undefined) => {
      failSession = error;
    },
  };
}

describe('OwnerLockSession (the owner lock on a session of its own)', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('answers the lock it holds rather than taking a second one, whose session would stay open', async () => {
    const { locks, sessions } = lockSession(() => Promise.resolve());
    const first = await locks.take(() => false);
    const again = await locks.take(() => false);
    expect(again).toBe(first);
    expect(sessions).toHaveLength(1);
    await locks.giveUp();
  });

  it('closes the connection instead of pooling it when the unlock does not answer', async () => {
    const { locks, sessions } = lockSession(() => Promise.reject(new Error('gone')));
    await locks.take(() => false);
    await locks.giveUp();
    expect(sessions[0]?.released).toBe(true);
    expect(locks.current).toBeUndefined();
  });

  it('after a failed take waits a second before asking for a session again', async () => {
    const { locks, sessions, failSessions } = lockSession(() => Promise.resolve());
    failSessions(new Error('too many clients'));
    await expect(locks.take(() => false)).rejects.toThrow('too many clients');
    failSessions(undefined);
    await expect(locks.take(() => false)).resolves.toBeUndefined();
    expect(sessions).toHaveLength(0);
    await jest.advanceTimersByTimeAsync(1_000);
    await expect(locks.take(() => false)).resolves.toBeDefined();
    await locks.giveUp();
  });

  it('renews on each answer; once unwatched, neither a hang nor a failure lapses it', async () => {
    const { locks, sessions, lapses } = lockSession(() => Promise.resolve());
    const lock = await locks.take(() => false);
    if (lock === undefined) throw new Error('no lock');
    const firstValidUntil = lock.validUntil;
    await jest.advanceTimersByTimeAsync(500);
    await locks.ask();
    expect(lock.validUntil).toBeGreaterThan(firstValidUntil);
    locks.keepUnwatched();
    (sessions[0] as FakeLockSession).answer = 'fail';
    await locks.ask();
    await jest.advanceTimersByTimeAsync(5_000);
    expect(lapses).toEqual([]);
    expect(locks.current).toBe(lock);
    await locks.giveUp();
  });
});

describe('Repeating', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('times each run from the last one’s start, keeps the least gap after a slow one, and goes on after a failure', async () => {
    const starts: number[] = [];
    let slow = false;
    const repeating = new Repeating(
      async () => {
        starts.push(Date.now());
        if (slow) await new Promise((resolve) => setTimeout(resolve, 150));
        if (starts.length === 2) throw new Error('a failed run');
      },
      100,
      25,
    );
    const t0 = Date.now();
    repeating.start();
    await jest.advanceTimersByTimeAsync(250);
    slow = true;
    await jest.advanceTimersByTimeAsync(400);
    repeating.stop();
    const at = starts.map((s) => s - t0);
    expect(at.slice(0, 3)).toEqual([0, 100, 200]);
    // The run at 300 took 150 ms: the next starts the least gap after it ended, at 475.
    expect(at.slice(3, 5)).toEqual([300, 475]);
  });
});
