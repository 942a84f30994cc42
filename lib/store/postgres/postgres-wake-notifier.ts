import { Logger } from '@nestjs/common';
import { describeError } from '../../internal/describe-error';
import type { SqlPort } from '../ports/sql-port';

/**
 * The NOTIFY that wakes the LISTENing dispatchers, sent after the commits that enqueued rather
 * than inside those transactions, where the connection reports its commits
 * (`OutboxConnection.afterCommit`).
 *
 * Inside the transaction it cost the app's commit more than the row did: PostgreSQL serialises
 * the commits of all transactions that notified, holding its notify lock until the commit's WAL
 * flush is done, so concurrent enqueues lost group commit (8 clients: 1.30 × a hand INSERT's
 * time, 0.93 × without the NOTIFY; bench P5). Sent on its own, a NOTIFY is a transaction that
 * writes no WAL, and it is coalesced: one in flight at a time, and one more after it for the
 * commits that came while it was, so that each commit is followed by a NOTIFY sent after it.
 * Only a wake-up: a lost one (a crash after the commit, a failed statement) costs latency
 * until the next poll, never a message.
 */
export class PostgresWakeNotifier {
  private readonly logger = new Logger('OutboxStore');
  /** The NOTIFYs being sent, until the last one answers (awaited by `close`). */
  private sending: Promise<void> | undefined;
  private busy = false;
  /** Commits reported while a NOTIFY was in flight: another goes after it. */
  private again = false;
  private closed = false;

  constructor(
    private readonly sql: SqlPort,
    /** The channel, as pg_notify takes it (unquoted). */
    private readonly channel: string,
  ) {}

  /** A commit that enqueued: wake the listeners, now or right after the NOTIFY in flight. */
  wake(): void {
    if (this.closed) return;
    if (this.busy) {
      this.again = true;
      return;
    }
    this.busy = true;
    this.sending = this.send();
  }

  /** Waits for the NOTIFY in flight; no more are sent. */
  async close(): Promise<void> {
    this.closed = true;
    await this.sending;
  }

  private async send(): Promise<void> {
    do {
      this.again = false;
      try {
        await this.sql.query('SELECT pg_notify($1::text, $2::text)', [this.channel, '']);
      } catch (error) {
        // The listeners then wake at their next poll; a database away is reported elsewhere.
        if (!this.closed) this.logger.debug(`NOTIFY failed: ${describeError(error)}`);
      }
    } while (this.again && !this.closed);
    // In the same turn as the last look at `again`: a commit reported later starts a new send.
    this.busy = false;
  }
}
