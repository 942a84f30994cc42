import { resolve } from 'node:path';
import { DispatcherProcess, type DispatcherProcessExit } from '../../../lib/testing';
import type { ChildConfig, ChildMessage, ChildTotals } from './child-protocol';

const ROOT = resolve(__dirname, '../../..');
const SCRIPT = resolve(__dirname, '../dispatcher-child.ts');
/** Transpiles the child's TypeScript once per change, not once per child (register-ts.js). */
export const REGISTER_TS = resolve(__dirname, 'register-ts.js');

const isChildMessage = (m: unknown): m is ChildMessage =>
  typeof m === 'object' && m !== null && typeof (m as { type?: unknown }).type === 'string';

/**
 * A dispatcher in a child process (test/support/dispatcher-child.ts), started, killed and
 * stopped through the fault kit's `DispatcherProcess`; this adds the child's own protocol
 * (children/child-protocol.ts): its config, its 'hanging' report and its totals at a stop.
 */
export class DispatcherChild {
  private constructor(
    readonly config: ChildConfig,
    private readonly process: DispatcherProcess,
  ) {}

  /**
   * Forks the child and waits until its dispatcher is running; `nodeArgs` go to its `node`
   * (`--max-old-space-size=…`). The wait is a failure deadline only: the first child after a
   * change transpiles the library, which takes tens of seconds on a busy two-core machine.
   */
  static async start(
    config: ChildConfig,
    timeoutMs = 120_000,
    nodeArgs: readonly string[] = [],
  ): Promise<DispatcherChild> {
    const child = await DispatcherProcess.start({
      script: SCRIPT,
      cwd: ROOT,
      execArgv: [...nodeArgs, '-r', REGISTER_TS],
      env: { OUTBOX_CHILD: JSON.stringify(config) },
      readyTimeoutMs: timeoutMs,
    });
    return new DispatcherChild(config, child);
  }

  get pid(): number {
    return this.process.pid;
  }

  get messages(): ChildMessage[] {
    return this.process.messages.filter(isChildMessage);
  }

  /** The child's stdout and stderr, for diagnosing a failure. */
  get output(): string {
    return this.process.output;
  }

  get exited(): Promise<DispatcherProcessExit> {
    return this.process.exited;
  }

  /** Resolves with the first message of `type`; rejects on timeout, on an error report or if the child dies first. */
  async waitFor<T extends ChildMessage['type']>(
    type: T,
    timeoutMs: number,
  ): Promise<Extract<ChildMessage, { type: T }>> {
    const found = await this.process.waitForMessage(
      type,
      (m): m is ChildMessage => isChildMessage(m) && (m.type === type || m.type === 'error'),
      timeoutMs,
    );
    if (found.type === 'error')
      throw new Error(
        `dispatcher child ${this.config.instanceId} failed: ${found.error}\n${this.output}`,
      );
    return found as Extract<ChildMessage, { type: T }>;
  }

  /** Kills the process (SIGKILL by default: no shutdown hooks run) and waits for its exit. */
  kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<DispatcherProcessExit> {
    return this.process.kill(signal);
  }

  /** Graceful stop through IPC; resolves to the dispatcher's totals. */
  async stop(timeoutMs = 20_000): Promise<ChildTotals> {
    if (this.process.exitStatus !== undefined)
      throw new Error(`dispatcher child ${this.config.instanceId} already exited\n${this.output}`);
    this.process.send({ type: 'stop' });
    const stopped = await this.waitFor('stopped', timeoutMs);
    await this.process.stop(5_000);
    return stopped.totals;
  }
}
