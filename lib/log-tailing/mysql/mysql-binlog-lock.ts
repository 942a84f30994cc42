import type { MysqlLockConnection } from './mysql-binlog-client';

/**
 * The named lock that makes one process the reader, held by its own connection for as long as
 * it reads: the server releases it the moment that connection ends (a stop, a crash, a KILL),
 * and a standby's next `GET_LOCK` takes it. `lost` settles once the connection is gone, found
 * by the connection's own error or by a ping every `checkMs`.
 */
export class MysqlBinlogLock {
  readonly lost: Promise<Error>;
  private declareLost: (error: Error) => void = () => undefined;
  private readonly timer: NodeJS.Timeout;
  private released = false;

  constructor(
    readonly connection: MysqlLockConnection,
    private readonly name: string,
    checkMs: number,
  ) {
    this.lost = new Promise<Error>((resolve) => {
      this.declareLost = resolve;
    });
    connection.on('error', (error) => this.declareLost(error ?? new Error('lock connection lost')));
    connection.on('end', () => this.declareLost(new Error('lock connection ended')));
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

  /** Releases the lock and closes its connection; a connection that does not answer is dropped. */
  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    clearInterval(this.timer);
    try {
      await this.connection.query('SELECT RELEASE_LOCK(?)', [this.name]);
      await this.connection.end();
    } catch {
      this.connection.destroy();
    }
    this.declareLost(new Error('lock released'));
  }

  /** Whether this connection still holds the lock (false once it is lost or released). */
  async held(): Promise<boolean> {
    if (this.released) return false;
    try {
      const [rows] = await this.connection.query(
        'SELECT IS_USED_LOCK(?) = CONNECTION_ID() AS mine',
        [this.name],
      );
      const mine = (rows as { mine: unknown }[])[0]?.mine;
      if (Number(mine) === 1) return true;
      this.declareLost(new Error('the binlog lock is no longer held'));
    } catch (error) {
      this.declareLost(error instanceof Error ? error : new Error(String(error)));
    }
    return false;
  }

  private async check(): Promise<void> {
    await this.held();
  }
}
