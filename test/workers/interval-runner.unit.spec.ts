import { Logger } from '@nestjs/common';
import { IntervalRunner } from '../../lib/workers/interval-runner';

/** A task whose runs end when the test says so. */
function gatedTask(): { task: () => Promise<number>; runs: () => number; finish: () => void } {
  let runs = 0;
  let release: (() => void) | undefined;
  return {
    task: () => {
      runs += 1;
      return new Promise<number>((resolve) => (release = () => resolve(runs)));
    },
    runs: () => runs,
    finish: () => release?.(),
  };
}

const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('IntervalRunner.request', () => {
  it('runs once more after the run in progress when asked during it, however often', async () => {
    const gate = gatedTask();
    const runner = new IntervalRunner('t', undefined, new Logger('t'), gate.task);
    runner.request();
    expect(gate.runs()).toBe(1);
    runner.request();
    runner.request();
    gate.finish();
    await settle();
    // The requests during the first run became exactly one more run.
    expect(gate.runs()).toBe(2);
    gate.finish();
    await settle();
    expect(gate.runs()).toBe(2);
    expect(runner.running).toBe(false);
  });

  it('costs no extra run when the run in progress cleared the request itself', async () => {
    const gate = gatedTask();
    const runner = new IntervalRunner('t', undefined, new Logger('t'), gate.task);
    runner.request();
    runner.request();
    expect(runner.requested).toBe(true);
    runner.clearRequest(); // the run looked again by itself
    gate.finish();
    await settle();
    expect(gate.runs()).toBe(1);
  });
});
