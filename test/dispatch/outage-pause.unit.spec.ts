import { Logger } from '@nestjs/common';
import { DispatcherLog } from '../../lib/dispatch/dispatcher-log';
import { OutagePause } from '../../lib/dispatch/health/outage-pause';
import { OutageProbe } from '../../lib/dispatch/health/outage-probe';
import { sleep } from '../support/wait-for';

// The pause of claims after an outage and its probe: clear → paused → resuming → paused (twice
// as long, up to the most) → clear when a publish or a probe gets through; logged once each way.

class Lines extends Logger {
  readonly lines: string[] = [];
  override log(message: string): void {
    this.lines.push(`log ${message}`);
  }
  override warn(message: string): void {
    this.lines.push(`warn ${message}`);
  }
  override debug(message: string): void {
    this.lines.push(`debug ${message}`);
  }
}

describe('OutagePause', () => {
  let now = 0;
  const setup = () => {
    const logger = new Lines();
    const log = new DispatcherLog(logger, 'default', 'abcd0123');
    return { logger, pause: new OutagePause(100, 400, log, () => now) };
  };
  beforeEach(() => (now = 10_000));

  it('pauses, doubling up to the most, and resumes when the pause runs out', () => {
    const { pause } = setup();
    expect(pause.state).toBe('clear');
    expect(pause.pause(new Error('down'), 'claim failed', 'no attempt counted')).toBe(100);
    expect(pause.state).toBe('paused');
    expect(pause.pausedUntil).toBe(10_100);
    now += 100;
    expect(pause.state).toBe('resuming');
    expect(pause.paused).toBe(false);
    expect(pause.pause(new Error('down'), 'claim failed', 'x')).toBe(200);
    now += 200;
    expect(pause.pause(new Error('down'), 'claim failed', 'x')).toBe(400);
    now += 400;
    expect(pause.pause(new Error('down'), 'claim failed', 'x')).toBe(400);
  });

  it('ends the outage when a publish goes through, the next pause starting short again', () => {
    const { pause, logger } = setup();
    pause.pause(new Error('ECONNREFUSED'), 'publish failed', 'no attempt counted');
    now += 50;
    pause.pause(new Error('ECONNREFUSED'), 'publish failed', 'no attempt counted');
    now += 250;
    pause.publishWentThrough();
    expect(pause.state).toBe('clear');
    expect(pause.pause(new Error('again'), 'publish failed', 'x')).toBe(100);
    expect(logger.lines).toEqual([
      'warn Outage begun (run abcd0123): publish failed: Error: ECONNREFUSED; pausing claims for 100 ms (no attempt counted)',
      'debug publish failed: Error: ECONNREFUSED; pausing claims for 200 ms (no attempt counted) (run abcd0123)',
      'log Outage over after 300 ms (run abcd0123): a publish went through; claiming again',
      'warn Outage begun (run abcd0123): publish failed: Error: again; pausing claims for 100 ms (x)',
    ]);
  });

  it('resumes at once when a probe is answered, the next pause still doubling the last', () => {
    const { pause } = setup();
    pause.pause(new Error('down'), 'publish failed', 'x');
    pause.probeAnswered();
    expect(pause.state).toBe('clear');
    expect(pause.paused).toBe(false);
    expect(pause.pause(new Error('down'), 'publish failed', 'x')).toBe(200);
  });

  it('says nothing of an outage that never began', () => {
    const { pause, logger } = setup();
    pause.publishWentThrough();
    pause.probeAnswered();
    expect(logger.lines).toEqual([]);
  });
});

describe('OutageProbe', () => {
  const setup = (ping: ((signal: AbortSignal) => Promise<void>) | undefined) => {
    const log = new DispatcherLog(new Lines(), 'default', 'abcd0123');
    const pause = new OutagePause(60_000, 60_000, log);
    let woken = 0;
    const probe = new OutageProbe(
      pause,
      { ping, stopping: () => false, wake: () => (woken += 1), releasedDueAt: () => 0 },
      1_000,
      5,
      log,
    );
    return { pause, probe, woken: () => woken };
  };
  const until = async (done: () => boolean): Promise<void> => {
    while (!done()) await sleep(2);
  };

  it('probes while paused, one probe at a time, and resumes claims once the broker answers', async () => {
    let pings = 0;
    const { pause, probe, woken } = setup(() => {
      pings += 1;
      return pings < 3 ? Promise.reject(new Error('still down')) : Promise.resolve();
    });
    pause.pause(new Error('down'), 'publish failed', 'x');
    probe.start();
    probe.start();
    expect(probe.state).toBe('probing');
    await until(() => probe.state === 'idle');
    expect(pings).toBe(3);
    expect(pause.state).toBe('clear');
    expect(woken()).toBe(1);
  });

  it('stays idle without a ping, and stops once the pause is over', async () => {
    const none = setup(undefined);
    none.pause.pause(new Error('down'), 'publish failed', 'x');
    none.probe.start();
    expect(none.probe.state).toBe('idle');

    const { pause, probe, woken } = setup(() => Promise.reject(new Error('down')));
    pause.pause(new Error('down'), 'publish failed', 'x');
    probe.start();
    pause.publishWentThrough();
    pause.probeAnswered();
    await until(() => probe.state === 'idle');
    expect(woken()).toBe(0);
  });
});
