import { fork, type ChildProcess } from 'node:child_process';
import { refuseUnknownTestingOptions } from './testing-option-keys';

/** How a dispatcher process ended: its exit code, or the signal that ended it. */
export interface DispatcherProcessExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** How `DispatcherProcess.start` runs your dispatcher's entry file. */
export interface DispatcherProcessOptions {
  /**
   * The file that boots your app with its dispatcher (your own module set-up, publisher and
   * connection) and then calls `reportDispatcherReady()` from `nestjs-outbox/testing`.
   */
  readonly script: string;
  /** Arguments after the script. @default [] */
  readonly args?: readonly string[];
  /**
   * Options of the child's `node`: none for an entry your build compiled (`nest build`:
   * `dist/outbox-dispatcher.main.js`), `['-r', 'ts-node/register/transpile-only']` for a
   * TypeScript entry file in a CommonJS app that has ts-node. @default []
   */
  readonly execArgv?: readonly string[];
  /** Variables added to this process's environment for the child. @default {} */
  readonly env?: Readonly<Record<string, string>>;
  /** The child's working directory. @default process.cwd() */
  readonly cwd?: string;
  /** How long `start` waits for `reportDispatcherReady()` before it kills the child. @default 120000 */
  readonly readyTimeoutMs?: number;
}

/** The message `reportDispatcherReady()` sends the parent over the IPC channel. */
const READY = 'nestjs-outbox:dispatcher-ready';

/** The last characters of the child's output kept for error messages. */
const OUTPUT_KEPT = 20_000;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function isReady(message: unknown): boolean {
  return (
    typeof message === 'object' &&
    message !== null &&
    (message as { type?: unknown }).type === READY
  );
}

/**
 * Tells the parent (`DispatcherProcess.start`) that this process's dispatcher is running. Call
 * it in your dispatcher's entry file once the app is initialised; outside a child started with
 * an IPC channel it does nothing.
 */
export function reportDispatcherReady(): void {
  process.send?.({ type: READY, pid: process.pid });
}

/**
 * Your dispatcher in a process of its own, which a test kills (`kill()`: SIGKILL, no shutdown
 * hook runs), freezes (`pause()`: SIGSTOP, as a long GC pause or a stopped VM) and thaws
 * (`resume()`), or stops gracefully (`stop()`: SIGTERM). Your entry file boots the app and calls
 * `reportDispatcherReady()`:
 *
 * ```ts
 * // src/outbox-dispatcher.main.ts, built with the app (docs/testing.md has a complete one)
 * const app = await NestFactory.createApplicationContext(AppModule); // OutboxModule with autoStart
 * app.enableShutdownHooks();
 * reportDispatcherReady();
 * ```
 *
 * ```ts
 * const dispatcher = await DispatcherProcess.start({ script: 'dist/outbox-dispatcher.main.js' });
 * await dispatcher.kill();
 * ```
 */
export class DispatcherProcess {
  /** Every IPC message the child sent, in order. */
  readonly messages: unknown[] = [];
  /** Resolves when the process has exited. */
  readonly exited: Promise<DispatcherProcessExit>;
  private exit: DispatcherProcessExit | undefined;
  private outputText = '';

  private constructor(
    readonly options: DispatcherProcessOptions,
    private readonly child: ChildProcess,
  ) {
    child.stdout?.on('data', (chunk: Buffer) => this.log(chunk));
    child.stderr?.on('data', (chunk: Buffer) => this.log(chunk));
    child.on('message', (message: unknown) => this.messages.push(message));
    // A kill or a disconnect can race a send: the child is gone either way.
    child.on('error', () => undefined);
    this.exited = new Promise<DispatcherProcessExit>((done) =>
      child.once('exit', (code, signal) => {
        this.exit = { code, signal };
        done(this.exit);
        // The last output arrives just after the exit; a process the child started may hold
        // the pipes for ever, which would keep the test runner's process alive.
        setTimeout(() => {
          child.stdout?.destroy();
          child.stderr?.destroy();
          if (child.connected) child.disconnect();
        }, 1_000).unref();
      }),
    );
  }

  /**
   * Starts `options.script` with an IPC channel and resolves once it called
   * `reportDispatcherReady()`; rejects (and kills the child) if it exits, or is not ready within
   * `readyTimeoutMs`, with its last output.
   */
  static async start(options: DispatcherProcessOptions): Promise<DispatcherProcess> {
    refuseUnknownTestingOptions('DispatcherProcess.start()', options, {
      '': {
        script: true,
        args: true,
        execArgv: true,
        env: true,
        cwd: true,
        readyTimeoutMs: true,
      } satisfies Record<keyof DispatcherProcessOptions, true>,
    });
    const child = fork(options.script, [...(options.args ?? [])], {
      cwd: options.cwd,
      execArgv: [...(options.execArgv ?? [])],
      env: { ...process.env, ...options.env },
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    });
    const handle = new DispatcherProcess(options, child);
    try {
      await handle.waitForMessage('ready', isReady, options.readyTimeoutMs ?? 120_000);
    } catch (error) {
      await handle.kill();
      throw error;
    }
    return handle;
  }

  /** Another process of the same script and options, started like `start`. */
  restart(): Promise<DispatcherProcess> {
    return DispatcherProcess.start(this.options);
  }

  /** The child's process id. */
  get pid(): number {
    return this.child.pid ?? -1;
  }

  /** How it ended; undefined while it runs. */
  get exitStatus(): DispatcherProcessExit | undefined {
    return this.exit;
  }

  /** The last 20 000 characters the child wrote to stdout and stderr. */
  get output(): string {
    return this.outputText;
  }

  /**
   * Resolves with the first message `match` accepts; rejects after `timeoutMs`, or at once if
   * the child exits first, saying what it waited for (`what`) and the child's last output.
   */
  async waitForMessage<T>(
    what: string,
    match: (message: unknown) => message is T,
    timeoutMs: number,
  ): Promise<T>;
  async waitForMessage(
    what: string,
    match: (message: unknown) => boolean,
    timeoutMs: number,
  ): Promise<unknown>;
  async waitForMessage(
    what: string,
    match: (message: unknown) => boolean,
    timeoutMs: number,
  ): Promise<unknown> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.messages.find(match);
      if (found !== undefined) return found;
      if (this.exit !== undefined)
        throw new Error(
          `dispatcher process ${this.options.script} exited (${JSON.stringify(this.exit)}) before "${what}"\n${this.outputText}`,
        );
      if (Date.now() > deadline)
        throw new Error(
          `dispatcher process ${this.options.script}: no "${what}" within ${timeoutMs} ms\n${this.outputText}`,
        );
      await sleep(20);
    }
  }

  /** Sends `message` to the child over the IPC channel. */
  send(message: object): void {
    if (this.exit === undefined && this.child.connected) this.child.send(message);
  }

  /**
   * Sends `signal` (SIGKILL by default: no shutdown hook runs) and waits for the exit; to
   * freeze the process, `pause()`.
   */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<DispatcherProcessExit> {
    if (signal === 'SIGSTOP' || signal === 'SIGCONT')
      throw new Error(`DispatcherProcess.kill(${signal}) would not end it: pause() or resume()`);
    if (this.exit === undefined) {
      this.child.kill(signal);
      // A paused process acts on no signal but SIGKILL until it is continued.
      if (signal !== 'SIGKILL') this.child.kill('SIGCONT');
    }
    return this.exited;
  }

  /** Freezes the process (SIGSTOP): its leases run out while it holds them. */
  pause(): void {
    if (this.exit === undefined) this.child.kill('SIGSTOP');
  }

  /** Thaws a paused process (SIGCONT). */
  resume(): void {
    if (this.exit === undefined) this.child.kill('SIGCONT');
  }

  /**
   * Stops the process gracefully (SIGTERM: your app's shutdown hooks run) and waits for the
   * exit; SIGKILLs it if it has not exited after `timeoutMs`.
   */
  async stop(timeoutMs = 20_000): Promise<DispatcherProcessExit> {
    if (this.exit !== undefined) return this.exit;
    this.child.kill('SIGTERM');
    this.child.kill('SIGCONT');
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), timeoutMs);
    });
    const exit = await Promise.race([this.exited, late]);
    clearTimeout(timer);
    return exit ?? this.kill('SIGKILL');
  }

  private log(chunk: Buffer): void {
    this.outputText = (this.outputText + chunk.toString()).slice(-OUTPUT_KEPT);
  }
}
