import { refuseUnknownCallOptions } from '../internal/known-keys';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import {
  DEFAULT_LOG_LINGER_MS,
  DEFAULT_LOG_SWEEP_INTERVAL_MS,
  type OutboxLogObserver,
  type OutboxLogSource,
  type OutboxLogSourceContext,
} from '../store/ports/outbox-log-source.port';
import type { OutboxDialect } from '../store/schema/outbox-table-ddl';
import { LOG_TAILING_DATABASES, logTailingTitles } from './log-tailing.databases';
import type { LogTailingOptions } from './log-tailing.options';
import { notNegativeOption, positiveOption, type LogTailingSettings } from './log-tailing.settings';

const DEFAULT_STANDBY_RETRY_MS = 1_000;
// About 2.5 MB of ids and keys per transaction; a transaction past it is a backfill, which the
// sweep delivers as fast as the log path would (it claims full batches back to back).
const DEFAULT_MAX_TRANSACTION_INSERTS = 10_000;
const DEFAULT_READER_TIMEOUT_MS = 5_000;

/**
 * The dispatcher's log observer: `OutboxModule.forRoot({ …, delivery: logTailing() })` makes
 * the dispatcher learn of new messages from the database's log (PostgreSQL logical replication;
 * MySQL/MariaDB's binlog) instead of polling for them. The table stays the record; see
 * docs/log-tailing.md. Throws `OutboxOptionsError` for a bad option.
 */
export function logTailing(options: LogTailingOptions = {}): OutboxLogObserver {
  refuseUnknownCallOptions('logTailing()', options, {
    '': {
      slotName: true,
      publicationName: true,
      connectionString: true,
      standbyRetryMs: true,
      readerTimeoutMs: true,
      createSlotTimeoutMs: true,
      sweepIntervalMs: true,
      lingerMs: true,
      maxQueued: true,
      maxTransactionInserts: true,
      serverId: true,
      binlogClient: true,
    } satisfies Record<keyof LogTailingOptions, true>,
  });
  const settings: LogTailingSettings = {
    options,
    standbyRetryMs: positiveOption(
      options.standbyRetryMs,
      DEFAULT_STANDBY_RETRY_MS,
      'standbyRetryMs',
    ),
    readerTimeoutMs: positiveOption(
      options.readerTimeoutMs,
      DEFAULT_READER_TIMEOUT_MS,
      'readerTimeoutMs',
    ),
    maxTransactionInserts: positiveOption(
      options.maxTransactionInserts,
      DEFAULT_MAX_TRANSACTION_INSERTS,
      'maxTransactionInserts',
    ),
  };
  const sweepIntervalMs = positiveOption(
    options.sweepIntervalMs,
    DEFAULT_LOG_SWEEP_INTERVAL_MS,
    'sweepIntervalMs',
  );
  const lingerMs = notNegativeOption(options.lingerMs, DEFAULT_LOG_LINGER_MS, 'lingerMs');
  // Every database checks its own options now, wherever the app runs: a bad slot name fails
  // on a laptop's SQLite as it would in production.
  const sources = new Map<OutboxDialect, (context: OutboxLogSourceContext) => OutboxLogSource>();
  for (const [dialect, database] of Object.entries(LOG_TAILING_DATABASES)) {
    if ('source' in database) sources.set(dialect as OutboxDialect, database.source(settings));
  }
  return {
    kind: 'log',
    sweepIntervalMs,
    lingerMs,
    create(context: OutboxLogSourceContext): OutboxLogSource {
      const source = sources.get(context.database);
      if (source === undefined) throw unsupported(context.database);
      return source(context);
    },
  };
}

/** A database with no log to read: the refusal the dispatcher also gives at bootstrap. */
function unsupported(dialect: OutboxDialect): OutboxOptionsError {
  const database = LOG_TAILING_DATABASES[dialect];
  const why = 'unsupported' in database ? database.unsupported : `${dialect} has no log source`;
  return new OutboxOptionsError(
    `delivery: log tailing needs ${logTailingTitles('or')}; ${why}. Use delivery: 'poll' (the default).`,
    'delivery',
  );
}
