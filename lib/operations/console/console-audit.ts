import { Logger } from '@nestjs/common';
import { describeError } from '../../internal/describe-error';
import type { OutboxConsoleAuditEntry } from './console.options';

const KEPT = 500;

/**
 * The console's audit log: the last 500 actions in memory (shown on its Audit page), each also
 * logged, and handed to the app's `audit` callback when it gives one. A table of its own is
 * still to come (see docs/console.md#audit-log): until then the entries outlive neither the
 * process nor the instance that took the action, unless the callback keeps them.
 */
export class ConsoleAuditLog {
  private readonly entries: OutboxConsoleAuditEntry[] = [];
  private readonly logger = new Logger('OutboxConsole');

  constructor(
    private readonly sink: ((entry: OutboxConsoleAuditEntry) => void | Promise<void>) | null,
  ) {}

  async record(entry: OutboxConsoleAuditEntry): Promise<void> {
    this.entries.unshift(entry);
    this.entries.length = Math.min(this.entries.length, KEPT);
    this.logger.log(
      `${entry.actor} ${entry.action} by ${entry.scope} (${entry.target}): ${entry.affected} of ${entry.confirmed} confirmed`,
    );
    if (this.sink === null) return;
    try {
      await this.sink(entry);
    } catch (error) {
      // The action is done by now: failing the page would invite a second, duplicate action.
      this.logger.error(`The audit callback failed for the entry above: ${describeError(error)}`);
    }
  }

  /** Newest first. */
  recent(): readonly OutboxConsoleAuditEntry[] {
    return this.entries;
  }
}
