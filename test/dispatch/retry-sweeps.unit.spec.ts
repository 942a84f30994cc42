import { RetrySweeps } from '../../lib/dispatch/log/retry-sweeps';

function observation(): { part: RetrySweeps; wakes: number[] } {
  const wakes: number[] = [];
  return { part: new RetrySweeps(() => wakes.push(Date.now())), wakes };
}

describe('RetrySweeps: the sweeps of the table that retries ask for under log tailing', () => {
  beforeEach(() => jest.useFakeTimers({ now: 0 }));
  afterEach(() => jest.useRealTimers());

  it('sweeps once, just after the earliest retry it was told of is due', () => {
    const { part, wakes } = observation();
    part.due([800, 300]);
    part.due([1_000]); // later: the sweep at 300 ms finds it too, or the next one does
    jest.advanceTimersByTime(310);
    expect(wakes).toEqual([]);
    jest.advanceTimersByTime(20);
    expect(wakes).toEqual([320]);
    jest.advanceTimersByTime(5_000);
    expect(wakes).toEqual([320]);
  });

  it('moves the sweep earlier for an earlier retry, and nothing for a batch with none', () => {
    const { part, wakes } = observation();
    part.due([2_000]);
    part.due([]);
    part.due([100]);
    jest.advanceTimersByTime(3_000);
    expect(wakes).toEqual([120]);
  });

  it('sweeps nothing after it stopped', () => {
    const { part, wakes } = observation();
    part.due([100]);
    part.stop();
    jest.advanceTimersByTime(1_000);
    expect(wakes).toEqual([]);
  });
});
