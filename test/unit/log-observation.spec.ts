import { LogObservation, type LogObservationHooks } from '../../lib/dispatch/log/log-observation';
import type { OutboxLogObserver } from '../../lib/store/ports/outbox-log-source.port';

function observation(sweepIntervalMs?: number): { part: LogObservation; wakes: number[] } {
  const wakes: number[] = [];
  const observer: OutboxLogObserver = {
    kind: 'log',
    ...(sweepIntervalMs === undefined ? {} : { sweepIntervalMs }),
    create: () => {
      throw new Error('not made in these cases');
    },
  };
  // Only `wake` is reached by the sweeps; the rest belongs to the source and the tailer.
  const hooks = { wake: () => wakes.push(Date.now()) } as unknown as LogObservationHooks;
  return { part: new LogObservation(observer, hooks), wakes };
}

describe('LogObservation: the sweeps of the table under log tailing', () => {
  beforeEach(() => jest.useFakeTimers({ now: 0 }));
  afterEach(() => jest.useRealTimers());

  it('sweeps every 5 s unless the observer says, and reports no lag before its source is made', async () => {
    expect(observation().part.sweepIntervalMs).toBe(5_000);
    expect(observation(250).part.sweepIntervalMs).toBe(250);
    expect(await observation().part.lag()).toBeNull();
  });

  it('sweeps once, just after the earliest retry it was told of is due', () => {
    const { part, wakes } = observation();
    part.retriesDue([800, 300]);
    part.retriesDue([1_000]); // later: the sweep at 300 ms finds it too, or the next one does
    jest.advanceTimersByTime(310);
    expect(wakes).toEqual([]);
    jest.advanceTimersByTime(20);
    expect(wakes).toEqual([320]);
    jest.advanceTimersByTime(5_000);
    expect(wakes).toEqual([320]);
  });

  it('moves the sweep earlier for an earlier retry, and nothing for a batch with none', () => {
    const { part, wakes } = observation();
    part.retriesDue([2_000]);
    part.retriesDue([]);
    part.retriesDue([100]);
    jest.advanceTimersByTime(3_000);
    expect(wakes).toEqual([120]);
  });

  it('sweeps nothing after it stopped', async () => {
    const { part, wakes } = observation();
    part.retriesDue([100]);
    await part.stop();
    jest.advanceTimersByTime(1_000);
    expect(wakes).toEqual([]);
  });
});
