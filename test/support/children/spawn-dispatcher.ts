import { fork, type ChildProcess } from 'node:child_process';
import { resolve } from 'node:path';
import type { ChildConfig, ChildMessage, ChildTotals } from './child-protocol';
import { sleep } from '../wait-for';

const ROOT = resolve(__dirname, '../../..');
const SCRIPT = resolve(__dirname, '../dispatcher-child.ts');

type Exit = { code: number | null; signal: NodeJS.Signals | null };

/** A dispatcher in a child process (test/support/dispatcher-child.ts). */
export class DispatcherChild {
  readonly messages: ChildMessage[] = [];
  /** The child's stdout and stderr, for diagnosing a failure. */
  output = '';
  readonly exited: Promise<Exit>;
  private exit: Exit | undefined;

  private constructor(
    readonly config: ChildConfig,
    private readonly child: ChildProcess,
  ) {
    child.stdout?.on('data', (chunk: Buffer) => this.log(chunk));
    child.stderr?.on('data', (chunk: Buffer) => this.log(chunk));
    child.on('message', (message: ChildMessage) => this.messages.push(message));
    this.exited = new Promise<Exit>((done) =>
      child.once('exit', (code, signal) => {
        this.exit = { code, signal };
        done(this.exit);
      }),
    );
  }

  /**
   * Forks the child and waits until its dispatcher is running; `nodeArgs` go to its `node`
   * (`--max-old-space-size=…`). The wait is a failure deadline only: ts-node compiles the child
   * first, which takes tens of seconds on a busy two-core machine.
   */
  static async start(
    config: ChildConfig,
    timeoutMs = 120_000,
    nodeArgs: readonly string[] = [],
  ): Promise<DispatcherChild> {
    const child = fork(SCRIPT, [], {
      cwd: ROOT,
      execArgv: [...nodeArgs, '-r', 'ts-node/register/transpile-only'],
      env: {
        ...process.env,
        OUTBOX_CHILD: JSON.stringify(config),
        TS_NODE_PROJECT: resolve(ROOT, 'tsconfig.json'),
      },
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    });
    const handle = new DispatcherChild(config, child);
    try {
      await handle.waitFor('ready', timeoutMs);
    } catch (error) {
      child.kill('SIGKILL');
      throw error;
    }
    return handle;
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  /** Resolves with the first message of `type`; rejects on timeout or if the child dies first. */
  async waitFor<T extends ChildMessage['type']>(
    type: T,
    timeoutMs: number,
  ): Promise<Extract<ChildMessage, { type: T }>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.messages.find((m) => m.type === type);
      if (found !== undefined) return found as Extract<ChildMessage, { type: T }>;
      const error = this.messages.find((m) => m.type === 'error');
      if (error !== undefined)
        throw new Error(
          `dispatcher child ${this.config.instanceId} failed: ${(error as { error: string }).error}\n${this.output}`,
        );
      if (this.exit !== undefined)
        throw new Error(
          `dispatcher child ${this.config.instanceId} exited (${JSON.stringify(this.exit)}) before "${type}"\n${this.output}`,
        );
      if (Date.now() > deadline)
        throw new Error(
          `dispatcher child ${this.config.instanceId}: no "${type}" within ${timeoutMs} ms\n${this.output}`,
        );
      await sleep(20);
    }
  }

  /** Kills the process (SIGKILL by default: no shutdown hooks run) and waits for its exit. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<Exit> {
    if (this.exit === undefined) this.child.kill(signal);
    return this.exited;
  }

  /** Graceful stop through IPC; resolves to the dispatcher's totals. */
  async stop(timeoutMs = 20_000): Promise<ChildTotals> {
    if (this.exit !== undefined)
      throw new Error(`dispatcher child ${this.config.instanceId} already exited\n${this.output}`);
    this.child.send({ type: 'stop' });
    const stopped = await this.waitFor('stopped', timeoutMs);
    const exit = await Promise.race([
      this.exited,
      new Promise<undefined>((r) => setTimeout(() => r(undefined), 5_000)),
    ]);
    if (exit === undefined) this.child.kill('SIGKILL');
    return stopped.totals;
  }

  private log(chunk: Buffer): void {
    this.output = (this.output + chunk.toString()).slice(-20_000);
  }
}
