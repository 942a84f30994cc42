import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from './transports/net';
import { waitFor } from './wait-for';

// A redis-server of a test's own, on a free port of 127.0.0.1, for the faults a test may not
// inflict on the machine's shared Redis: pausing the process (SIGSTOP), killing it, a password,
// a replica. Nothing is saved to disk; the data directory is a temporary one, removed at stop.

/** Why no private server can be started here, or undefined when `redis-server` runs. */
export function redisServerMissing(): string | undefined {
  const probe = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  return probe.status === 0 ? undefined : 'redis-server is not installed on this machine';
}

export class PrivateRedis {
  private child: ChildProcess;
  private exited: Promise<void>;

  private constructor(
    readonly port: number,
    private readonly args: readonly string[],
    private readonly dir: string,
  ) {
    ({ child: this.child, exited: this.exited } = this.spawn());
  }

  /** Starts a server with `args` (e.g. `--requirepass`, `--replicaof`) and waits until it answers. */
  static async start(args: readonly string[] = [], password?: string): Promise<PrivateRedis> {
    const server = new PrivateRedis(
      await freePort(),
      args,
      mkdtempSync(join(tmpdir(), 'outbox-redis-')),
    );
    await server.ready(password);
    return server;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** A client of the test's own to this server. */
  client(password?: string): Redis {
    return new Redis({ host: '127.0.0.1', port: this.port, password, maxRetriesPerRequest: 1 });
  }

  /** SIGSTOP: the server keeps its sockets but answers nothing, as a hung process. */
  pause(): void {
    this.child.kill('SIGSTOP');
  }

  /** SIGCONT: the server goes on, reading what was sent to it meanwhile. */
  resume(): void {
    this.child.kill('SIGCONT');
  }

  /** Kills the server (its data is gone: nothing is saved). */
  async kill(): Promise<void> {
    this.child.kill('SIGCONT');
    this.child.kill('SIGKILL');
    await this.exited;
  }

  /** Starts the server again on the same port with the same arguments. */
  async restart(password?: string): Promise<void> {
    await this.kill();
    ({ child: this.child, exited: this.exited } = this.spawn());
    await this.ready(password);
  }

  async stop(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }

  private spawn(): { child: ChildProcess; exited: Promise<void> } {
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        this.dir,
        ...this.args,
      ],
      { stdio: 'ignore' },
    );
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    return { child, exited };
  }

  private async ready(password?: string): Promise<void> {
    const client = new Redis({
      host: '127.0.0.1',
      port: this.port,
      password,
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    client.on('error', () => undefined);
    try {
      await waitFor(
        `redis-server on port ${this.port}`,
        async () => {
          const answer = await client
            .connect()
            .then(() => client.ping())
            .catch(() => undefined);
          if (answer !== 'PONG') client.disconnect();
          return answer === 'PONG';
        },
        { timeoutMs: 10_000, intervalMs: 50 },
      );
    } finally {
      client.disconnect();
    }
  }
}
