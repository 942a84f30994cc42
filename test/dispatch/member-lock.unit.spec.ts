import { MemberLock, type MemberLockParts } from '../../lib/dispatch/partitions/member-lock';
import type { DispatcherLog } from '../../lib/dispatch/dispatcher-log';
import type { EndingMember } from '../../lib/store/ports/outbox-store.port';
import { FakeLockSession } from '../support/fake-lock-session';

function memberLock(endGone: () => readonly EndingMember[] = () => []) {
  const sessions: FakeLockSession[] = [];
  const keys: number[] = [];
  const events: string[] = [];
  const parts: MemberLockParts = {
    session: () => {
      const session = new FakeLockSession();
      sessions.push(session);
      return Promise.resolve(session.asSession());
    },
    lock: (_session, key) => {
      keys.push(key);
      return Promise.resolve(true);
    },
    unlock: () => Promise.resolve(),
    endGone: () => Promise.resolve(endGone()),
    log: { warn: () => undefined, log: () => undefined } as unknown as DispatcherLog,
    lost: () => events.push('lost'),
    answered: () => events.push('answered'),
    gone: (afterMs) => events.push(`gone in ${afterMs}`),
  };
  return { lock: new MemberLock(parts), sessions, keys, events };
}

describe('MemberLock (the owner lock a partition owner names in its heartbeat)', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('counts while its session answers; when the session is lost it says so, closes it, and the next ensure takes a new key', async () => {
    const { lock, sessions, keys, events } = memberLock();
    lock.start();
    await lock.ensure();
    const first = lock.key();
    expect(first).toBe(keys[0]);
    await jest.advanceTimersByTimeAsync(2_000);
    expect(lock.holds(first as number)).toBe(true);
    (sessions[0] as FakeLockSession).answer = 'fail';
    await jest.advanceTimersByTimeAsync(300);
    expect(events).toEqual(['lost']);
    expect(lock.key()).toBeNull();
    expect(lock.holds(first as number)).toBe(false);
    expect(sessions[0]?.released).toBe(true);
    await lock.ensure();
    expect(lock.key()).toBe(keys[1]);
    expect(keys[1]).not.toBe(first);
    await lock.stop();
    expect(sessions[1]?.released).toBe(false);
  });

  it('stops counting a second after its last answered question when the session hangs, whatever the timers; keeps the session (no one may take over) until it has been silent for 10 s, then takes a new key', async () => {
    const { lock, sessions, keys, events } = memberLock();
    lock.start();
    await lock.ensure();
    const key = lock.key() as number;
    (sessions[0] as FakeLockSession).answer = 'hang';
    await jest.advanceTimersByTimeAsync(900);
    expect(lock.holds(key)).toBe(true);
    await jest.advanceTimersByTimeAsync(400);
    expect(lock.holds(key)).toBe(false);
    expect(lock.key()).toBeNull();
    expect(events).toEqual(['lost']);
    expect(sessions[0]?.released).toBeUndefined();
    // An ensure meanwhile takes no second lock: the silent one's session still holds its key.
    await lock.ensure();
    expect(sessions).toHaveLength(1);
    await jest.advanceTimersByTimeAsync(10_000);
    expect(sessions[0]?.released).toBe(true);
    expect(events).toEqual(['lost', 'lost']);
    await lock.ensure();
    expect(lock.key()).toBe(keys[1]);
    expect(keys[1]).not.toBe(key);
    await lock.stop();
  });

  it('a session that answers again after a stall counts again under the same key, and says so', async () => {
    const { lock, sessions, keys, events } = memberLock();
    lock.start();
    await lock.ensure();
    const key = lock.key() as number;
    const session = sessions[0] as FakeLockSession;
    session.answer = 'held';
    await jest.advanceTimersByTimeAsync(1_500);
    expect(lock.holds(key)).toBe(false);
    expect(events).toEqual(['lost']);
    // The question sent before the stall is answered late: that says nothing of now.
    session.resume();
    await jest.advanceTimersByTimeAsync(0);
    expect(lock.holds(key)).toBe(false);
    // The next heartbeat's question is answered in time.
    await jest.advanceTimersByTimeAsync(300);
    expect(lock.holds(key)).toBe(true);
    expect(lock.key()).toBe(key);
    expect(events).toEqual(['lost', 'answered']);
    expect(keys).toEqual([key]);
    expect(session.released).toBeUndefined();
    await lock.stop();
    expect(session.released).toBe(false);
  });

  it("asks for a take when the heartbeats a look found ending end: a grace after it ended one itself, sooner for one another's look ended", async () => {
    let ending: readonly EndingMember[] = [];
    const { lock, events } = memberLock(() => ending);
    lock.start();
    await jest.advanceTimersByTimeAsync(500);
    expect(events).toEqual([]);
    ending = [{ label: 'crashed-owner', cut: true, endsInMs: 1_250 }];
    await jest.advanceTimersByTimeAsync(100);
    ending = [{ label: 'crashed-elsewhere', cut: false, endsInMs: 700 }];
    await jest.advanceTimersByTimeAsync(100);
    ending = [];
    await jest.advanceTimersByTimeAsync(500);
    expect(events).toEqual(['gone in 1300', 'gone in 750']);
    await lock.stop();
  });
});
