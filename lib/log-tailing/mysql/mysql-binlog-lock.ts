import type { MysqlLockConnection } from './mysql-binlog-client';

// The most a graceful release waits for the server before the connection is closed instead
// (which frees the lock just the same, once the server sees the socket close).
const RELEASE_GRACE_MS = 1_000;

/**
 * The named lock that makes one process the reader, held by its own connection for as long as
 * it reads: the server releases it the moment that connection ends (a stop, a crash, a KILL, or
 * the session's `wait_timeout` once nothing arrives from it), and a standby's next `GET_LOCK`
 * takes it. `lost` settles once the lock is no longer this process's: the connection's own
 * error, or a check every `checkMs` that the server did not answer in time (the connection's
 * bound), or that found the lock gone. A lost lock's connection is closed, never awaited.
 */
export class MysqlBinlogLock {
  readonly lost: Promise<Error>;
  private lostWith: Error | undefined;
  private resolveLost: (error: Error) => void = () => undefined;
  private readonly timer: NodeJS.Timeout;
  private released = false;
  private checking = false;

  constructor(
    readonly connection: MysqlLockConnection,
    readonly name: string,
    checkMs: number,
  ) {
    this.lost = new Promise<Error>((resolve) => {
      this.resolveLost = resolve;
    });
    connection.on('error', (error) =>
      this.declareLost(error ?? new Error('the lock connection failed')),
    );
    connection.on('end', () => this.declareLost(new Error('the lock connection ended')));
    this.timer = setInterval(() => void this.check(), checkMs);
    this.timer.unref();
  }

  /** Takes the lock if free; answers the holder or null. Never waits for it. */
  static async take(
    connection: MysqlLockConnection,
    name: string,
    checkMs: number,
  ): Promise<MysqlBinlogLock | null> {
    const [rows] = await connection.query('SELECT GET_LOCK(?, 0) AS got', [name]);
    const got = (rows as { got: unknown }[])[0]?.got;
    return Number(got) === 1 ? new MysqlBinlogLock(connection, name, checkMs) : null;
  }

  /** Whether the lock is still this process's, as far as the last check knows. */
  get holding(): boolean {
    return !this.released && this.lostWith === undefined;
  }

  /**
   * Releases the lock and closes its connection, waiting a moment at most: a connection that
   * does not answer, or whose lock is already lost, is closed at once.
   */
  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    clearInterval(this.timer);
    if (this.lostWith !== undefined) {
      this.connection.destroy();
      return;
    }
    try {
      await this.connection.query('SELECT RELEASE_LOCK(?)', [this.name], RELEASE_GRACE_MS);
      await this.connection.end(RELEASE_GRACE_MS);
    } catch {
      this.connection.destroy();
    }
    this.declareLost(new Error('lock released'));
  }

  /** Whether this connection still holds the lock (false once it is lost or released). */
  async held(): Promise<boolean> {
    if (!this.holding) return false;
    try {
      const [rows] = await this.connection.query(
        'SELECT IS_USED_LOCK(?) = CONNECTION_ID() AS mine',
        [this.name],
      );
      const mine = (rows as { mine: unknown }[])[0]?.mine;
      if (Number(mine) === 1) return true;
      this.declareLost(new Error('the server no longer gives this connection the lock'));
    } catch (error) {
      this.declareLost(error instanceof Error ? error : new Error(String(error)));
    }
    return false;
  }

  /** One check at a time: a slow answer is not asked again behind itself. */
  private async check(): Promise<void> {
    if (this.checking) return;
    this.checking = true;
    try {
      await this.held();
    } finally {
      this.checking = false;
    }
  }

  private declareLost(error: Error): void {
    if (this.lostWith !== undefined) return;
    this.lostWith = error;
    this.resolveLost(error);
    // Whatever the server still thinks, this process reads no more under this lock: closing
    // the connection ends the session, and with it the lock, for the standby to take.
    if (!this.released) {
      clearInterval(this.timer);
      this.connection.destroy();
    }
  }
}
