import type { OutboxDispatcherOptions, OutboxRetryOptions } from '../../../lib';
import type { LogTailingOptions } from '../../../lib/log-tailing';

/** What test/support/dispatcher-child.ts is told through OUTBOX_CHILD. */
export interface ChildConfig {
  readonly db: 'postgres' | 'mariadb' | 'sqlite';
  /** The database file, for SQLite. */
  readonly sqlitePath?: string;
  readonly table: string;
  readonly instanceId: string;
  /** Port of the parent's TcpConsumer. */
  readonly tcpPort: number;
  /** Wait for the consumer's answer to each message (ClientProxyPublisher `mode: 'send'`). */
  readonly ack?: boolean;
  /** ClientProxyPublisher timeout per emit. */
  readonly publishTimeoutMs?: number;
  readonly dispatcher?: OutboxDispatcherOptions;
  readonly retry?: OutboxRetryOptions;
  /** Hang (never settle) in the batch that crosses this many published messages. */
  readonly hangAfter?: number;
  /** Observe the log (`delivery: logTailing(these)`) instead of polling. */
  readonly logTailing?: LogTailingOptions;
}

export interface ChildTotals {
  batches: number;
  claimed: number;
  published: number;
  fenced: number;
  released: number;
  retried: number;
  deadLettered: number;
}

export type ChildMessage =
  | { readonly type: 'hanging'; readonly claimed: string[]; readonly published: string[] }
  | { readonly type: 'stopped'; readonly totals: ChildTotals }
  | { readonly type: 'error'; readonly error: string };

export type ParentMessage = { readonly type: 'stop' };
