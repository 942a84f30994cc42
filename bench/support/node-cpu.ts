/**
 * Wall time and this process's CPU time of one call: a drain run in the bench's own process
 * (the module's dispatcher or a baseline relay) costs node CPU there, so the scenarios can put a
 * per-message figure beside each rate.
 */
export interface TimedCall {
  readonly seconds: number;
  /** User + system CPU of this process during the call, in microseconds. */
  readonly cpuUs: number;
}

export async function timedWithCpu(fn: () => Promise<unknown>): Promise<TimedCall> {
  const cpu = process.cpuUsage();
  const started = performance.now();
  await fn();
  const used = process.cpuUsage(cpu);
  return { seconds: (performance.now() - started) / 1000, cpuUs: used.user + used.system };
}
