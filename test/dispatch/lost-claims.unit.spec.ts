import { LostClaims } from '../../lib/dispatch/leases/lost-claims';

// The claims whose answer the dispatcher never read: released by token once their call ended,
// never while it may still commit, and forgotten once their lease is over.

describe('LostClaims', () => {
  let now = 0;
  const claims = () => new LostClaims(() => now);
  beforeEach(() => (now = 1_000));

  it('releases a failed claim once, and keeps it while the release fails', async () => {
    const lost = claims();
    lost.add('t1', Promise.reject(new Error('connection reset')), 30_000);
    await new Promise((resolve) => setImmediate(resolve));
    const failing = jest.fn().mockRejectedValue(new Error('still down'));
    await expect(lost.releaseEnded(failing)).rejects.toThrow('still down');
    expect(lost.size).toBe(1);
    const released: string[] = [];
    expect(await lost.releaseEnded((t) => (released.push(t), Promise.resolve(3)))).toBe(3);
    expect(released).toEqual(['t1']);
    expect(lost.size).toBe(0);
  });

  it('waits for a call still running (it may yet commit), then releases it', async () => {
    const lost = claims();
    let answer!: () => void;
    lost.add('t2', new Promise<void>((resolve) => (answer = resolve)), 30_000);
    const release = jest.fn().mockResolvedValue(0);
    expect(await lost.releaseEnded(release)).toBe(0);
    expect(release).not.toHaveBeenCalled();
    answer();
    await new Promise((resolve) => setImmediate(resolve));
    await lost.releaseEnded(release);
    expect(release).toHaveBeenCalledWith('t2');
    expect(lost.size).toBe(0);
  });

  it('forgets a claim whose lease is over: its rows are claimable again anyway', async () => {
    const lost = claims();
    lost.add('t3', new Promise<void>(() => undefined), 5_000);
    now += 5_001;
    const release = jest.fn().mockResolvedValue(0);
    await lost.releaseEnded(release);
    expect(release).not.toHaveBeenCalled();
    expect(lost.size).toBe(0);
  });
});
