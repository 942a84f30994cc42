import { DispatcherShutdown } from '../../lib/dispatch/dispatcher-shutdown';
import { PublisherUnavailableError } from '../../lib/errors/publisher-unavailable.error';

// The dispatcher's start and stop: idle → running → draining → stopped, or through aborting
// when what is in flight does not settle within the shutdown timeout.

describe('DispatcherShutdown', () => {
  it('runs once started, and stops once what is in flight settled', async () => {
    const life = new DispatcherShutdown();
    expect(life.state).toBe('idle');
    expect([life.running, life.stopping]).toEqual([false, false]);
    expect(life.start()).toBe(true);
    expect(life.start()).toBe(false);
    expect(life.state).toBe('running');
    life.beginStop();
    expect(life.state).toBe('draining');
    expect([life.running, life.stopping]).toEqual([false, true]);
    expect(await life.finishStop(() => Promise.resolve(), 1_000, 1_000)).toBe('idle');
    expect(life.state).toBe('stopped');
    expect(life.signal.aborted).toBe(false);
    expect(life.start()).toBe(true);
    expect(life.state).toBe('running');
  });

  it('aborts the publishes in flight past the timeout, then waits for them to settle', async () => {
    const life = new DispatcherShutdown();
    life.start();
    life.beginStop();
    let settle: () => void = () => undefined;
    const inFlight = new Promise<void>((resolve) => (settle = resolve));
    const seen: string[] = [];
    life.signal.addEventListener('abort', () => {
      seen.push(life.state);
      settle();
    });
    expect(await life.finishStop(() => inFlight, 20, 60_000)).toBe('timeout');
    expect(seen).toEqual(['aborting']);
    expect(life.signal.reason).toBeInstanceOf(PublisherUnavailableError);
    expect(life.state).toBe('stopped');
  });

  it('gives up on what ignores the abort once the grace has passed too', async () => {
    const life = new DispatcherShutdown();
    life.start();
    life.beginStop();
    const never = new Promise<void>(() => undefined);
    expect(await life.finishStop(() => never, 20, 20)).toBe('abandoned');
    expect(life.signal.aborted).toBe(true);
    expect(life.state).toBe('stopped');
  });
});
