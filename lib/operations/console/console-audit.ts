import { Logger } from '@nestjs/common';
import { describeError } from '../../internal/describe-error';
import type { ConsoleAuditStore } from './audit/console-audit-store';
import type { OutboxConsoleAuditEntry } from './console.options';

const KEPT = 500;

/**
 * The console's audit log: each action logged, written to the audit table when the app gives
 * one (option `auditTable`), and handed to the app's `audit` callback when it gives one. The
 * Audit page reads the table; without one, the last 500 entries kept in memory, which outlive
 * neither the process nor the instance that took the action.
 */
export class ConsoleAuditLog {
  private readonly entries: OutboxConsoleAuditEntry[] = [];
  private readonly logger = new Logger('OutboxConsole');

  constructor(
    private readonly sink: ((entry: OutboxConsoleAuditEntry) => void | Promise<void>) | null,
    private readonly table: ConsoleAuditStore | null = null,
  ) {}

  async record(entry: OutboxConsoleAuditEntry): Promise<void> {
    await this.keep(entry, this.table);
  }

  /**
   * An entry whose row is in the audit table already (a re-drive writes it with its first
   * copies): kept in memory, logged and handed to the callback only.
   */
  async noted(entry: OutboxConsoleAuditEntry): Promise<void> {
    await this.keep(entry, null);
  }

  private async keep(
    entry: OutboxConsoleAuditEntry,
    table: ConsoleAuditStore | null,
  ): Promise<void> {
    this.entries.unshift(entry);
    this.entries.length = Math.min(this.entries.length, KEPT);
    this.logger.log(
      `${entry.actor} ${entry.action} by ${entry.scope} (${entry.target}): ${entry.affected} of ${entry.confirmed} confirmed`,
    );
    // The action is done by now: failing the page would invite a second, duplicate action, so
    // a failed write is logged (with the entry just above it in the log) instead.
    if (table !== null) {
      try {
        await table.insert(entry);
      } catch (error) {
        this.logger.error(
          `The audit table write failed for the entry above: ${describeError(error)}`,
        );
      }
    }
    if (this.sink === null) return;
    try {
      await this.sink(entry);
    } catch (error) {
      this.logger.error(`The audit callback failed for the entry above: ${describeError(error)}`);
    }
  }

  /** Newest first: from the audit table when there is one. */
  recent(): Promise<readonly OutboxConsoleAuditEntry[]> {
    return this.table === null ? Promise.resolve(this.entries) : this.table.recent(KEPT);
  }

  /** Whether the entries are kept in a table (and so outlive the process). */
  get durable(): boolean {
    return this.table !== null;
  }
}
