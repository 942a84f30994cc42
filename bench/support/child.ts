/** Child processes (dispatchers, the TCP consumer) driven over IPC. */
import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

export interface ChildMessage {
  readonly type: string;
  readonly [key: string]: unknown;
}

export class Child {
  private readonly inbox: ChildMessage[] = [];
  private readonly waiters: { type: string; resolve: (m: ChildMessage) => void }[] = [];
  private exited: string | undefined;

  constructor(readonly process: ChildProcess) {
    process.on('message', (message: ChildMessage) => {
      const i = this.waiters.findIndex((w) => w.type === message.type);
      if (i >= 0) {
        const [w] = this.waiters.splice(i, 1);
        w?.resolve(message);
      } else {
        this.inbox.push(message);
      }
    });
    process.on('exit', (code, signal) => {
      this.exited = `exited with ${code ?? signal}`;
    });
  }

  send(message: ChildMessage): void {
    this.process.send(message);
  }

  /** Waits for the next message of `type` (failing if the child exits first or after timeoutMs). */
  async next(type: string, timeoutMs = 600_000): Promise<ChildMessage> {
    const i = this.inbox.findIndex((m) => m.type === type);
    if (i >= 0) return this.inbox.splice(i, 1)[0] as ChildMessage;
    return new Promise<ChildMessage>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`child: no "${type}" within ${timeoutMs} ms`)),
        timeoutMs,
      );
      const onExit = (): void => {
        clearTimeout(timer);
        reject(new Error(`child ${this.exited ?? 'exited'} before "${type}"`));
      };
      this.process.once('exit', onExit);
      this.waiters.push({
        type,
        resolve: (m) => {
          clearTimeout(timer);
          this.process.off('exit', onExit);
          resolve(m);
        },
      });
      if (this.exited !== undefined) onExit();
    });
  }

  async exit(timeoutMs = 30_000): Promise<void> {
    if (this.exited !== undefined || this.process.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.process.kill('SIGKILL');
        resolve();
      }, timeoutMs);
      this.process.once('exit', () => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}

/** Asks a child to exit and waits for it; one that already died (its channel closed) is fine. */
export async function stopChild(child: Child | undefined): Promise<void> {
  if (child === undefined) return;
  try {
    child.send({ type: 'exit' });
  } catch {
    // It exited already: nothing to ask.
  }
  await child.exit();
}

/** Forks a TypeScript entry of bench/support under ts-node (transpile only). */
export function forkTs(entry: string, config: unknown, nodeArgs: string[] = []): Child {
  const child = fork(join(__dirname, entry), [], {
    execArgv: [...nodeArgs, '-r', 'ts-node/register/transpile-only'],
    env: { ...process.env, BENCH_CHILD: JSON.stringify(config) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Child(child);
}

/** Child side: the config, a sender, and a way to wait for the parent's messages. */
export function childSide<T>(): {
  config: T;
  send(m: ChildMessage): void;
  next(type: string | string[]): Promise<ChildMessage>;
} {
  const config = JSON.parse(process.env.BENCH_CHILD ?? '{}') as T;
  const inbox: ChildMessage[] = [];
  const waiters: { types: string[]; resolve: (m: ChildMessage) => void }[] = [];
  process.on('message', (message: ChildMessage) => {
    const i = waiters.findIndex((w) => w.types.includes(message.type));
    if (i >= 0) waiters.splice(i, 1)[0]?.resolve(message);
    else inbox.push(message);
  });
  // The parent going away ends the child.
  process.on('disconnect', () => process.exit(0));
  return {
    config,
    send: (m) => process.send?.(m),
    next: (type) => {
      const types = Array.isArray(type) ? type : [type];
      const i = inbox.findIndex((m) => types.includes(m.type));
      if (i >= 0) return Promise.resolve(inbox.splice(i, 1)[0] as ChildMessage);
      return new Promise((resolve) => waiters.push({ types, resolve }));
    },
  };
}
