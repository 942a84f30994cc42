import { RetrySweeps } from '../../lib/dispatch/log/retry-sweeps';

function observation(): { part: RetrySweeps; wakes: number[] } {
  const wakes: number[] = [];
  return { part: new RetrySweeps(() => wakes.push(Date.now())), wakes };
}

describe('RetrySweeps: the sweeps of the table that retries ask for under log tailing', () => {
  beforeEach(() => jest.useFakeTimers({ now: 0 }));
  afterEach(() => jest.useRealTimers());

  it('sweeps just after each retry it was told of is due: a sweep finds only what is due when it runs', () => {
    const { part, wakes } = observation();
    part.due([800, 300]);
    part.due([1_000]);
    jest.advanceTimersByTime(310);
    expect(wakes).toEqual([]);
    jest.advanceTimersByTime(20);
    expect(wakes).toEqual([320]);
    jest.advanceTimersByTime(5_000);
    expect(wakes).toEqual([320, 820, 1_020]);
  });

  it('moves the sweep earlier for an earlier retry and keeps the later one; nothing for a batch with none', () => {
    const { part, wakes } = observation();
    part.due([2_000]);
    part.due([]);
    part.due([100]);
    jest.advanceTimersByTime(3_000);
    expect(wakes).toEqual([120, 2_020]);
  });

  it('one sweep for retries due within a few milliseconds of each other, and one for those already due', () => {
    const { part, wakes } = observation();
    part.due([500, 503, 505]);
    jest.advanceTimersByTime(1_000);
    expect(wakes).toEqual([520]);
    part.due([0, -5]);
    jest.advanceTimersByTime(100);
    expect(wakes).toEqual([520, 1_020]);
  });

  it('sweeps nothing after it stopped', () => {
    const { part, wakes } = observation();
    part.due([100, 2_000]);
    part.stop();
    jest.advanceTimersByTime(3_000);
    expect(wakes).toEqual([]);
  });
});
