/**
 * Baseline (c): pg-transactional-outbox 0.5.7 with its logical-replication listener, publishing
 * each message to the same RabbitMQ queue on a confirm channel. Two configurations:
 *  - 'readme': as its README's producer example configures it (mutex concurrency controller,
 *    max-attempts and poisonous-message protection off, 2 s processing timeout);
 *  - 'fast':   its fastest configuration, 10 concurrent handlers (semaphore controller).
 * Every message is handled in its own transaction (SELECT … FOR NO KEY UPDATE NOWAIT, publish,
 * UPDATE processed_at, COMMIT), which is what bounds its throughput.
 */
import type { ConfirmChannel } from 'amqplib';
import type { ConfirmLink } from '../support/rabbit';
import { Client, Pool } from '../support/pg';
import {
  DatabaseSetup,
  createReplicationMutexConcurrencyController,
  createReplicationSemaphoreConcurrencyController,
  initializeReplicationMessageListener,
  type GeneralMessageHandler,
  type ReplicationListenerConfig,
  type TransactionalMessage,
} from 'pg-transactional-outbox';
import { KEYS, named } from '../support/config';
import { PAD, pgConfig } from '../support/databases';
import { toError } from '../support/stats';
import { sleep } from '../../test/support/wait-for';

export type PgtoMode = 'readme' | 'fast';

const SCHEMA = 'public';
const TABLE = named('pgto_outbox');
const PUBLICATION = named('pgto_bench_pub');
const SLOT = named('pgto_bench_slot');

/** A pino-compatible logger that keeps warnings and errors (the reasons messages are skipped). */
class CountingPgtoLogger {
  readonly warnings = new Map<string, number>();
  level = 'info';
  private note(args: unknown[]): void {
    const text = args
      .map((a) => (typeof a === 'string' ? a : a instanceof Error ? a.message : ''))
      .join(' ')
      .replace(/[0-9a-f-]{36}|\d+\/[0-9A-F]+/g, '…')
      .slice(0, 140);
    this.warnings.set(text, (this.warnings.get(text) ?? 0) + 1);
  }
  fatal = (...args: unknown[]): void => this.note(args);
  error = (...args: unknown[]): void => this.note(args);
  warn = (...args: unknown[]): void => this.note(args);
  info = (): void => undefined;
  debug = (): void => undefined;
  trace = (): void => undefined;
  silent = (): void => undefined;
}

export interface PgtoRun {
  /** Messages committed to its outbox for this run. */
  readonly committed: number;
  /** Rows its listener marked processed. */
  readonly processed: number;
  /** Seconds from listener start to the last processed message (database clock). */
  readonly seconds: number;
  /** Committed messages still unprocessed after the settle period. */
  readonly unprocessed: number;
  readonly warnings: Record<string, number>;
}

export class PgtoBaseline {
  private readonly pool = new Pool({ ...pgConfig(), max: 10 });

  private channel: ConfirmChannel | undefined;

  constructor(
    private readonly mode: PgtoMode,
    private readonly link: ConfirmLink,
    private readonly queue: string,
  ) {}

  /** wal_level must be logical for the replication listener. */
  static async walLevel(): Promise<string> {
    const client = new Client(pgConfig());
    await client.connect();
    try {
      return (
        (await client.query<{ wal_level: string }>('SHOW wal_level')).rows[0]?.wal_level ??
        'unknown'
      );
    } finally {
      await client.end();
    }
  }

  /** Creates its table (with its own DDL), the publication and the replication slot. */
  async setup(): Promise<void> {
    await this.dropSlot();
    const cfg = {
      outboxOrInbox: 'outbox' as const,
      database: pgConfig().database ?? '',
      schema: SCHEMA,
      table: TABLE,
      listenerRole: 'postgres',
      publication: PUBLICATION,
      replicationSlot: SLOT,
    };
    await this.pool.query(DatabaseSetup.dropAndCreateTable(cfg));
    await this.pool.query(
      `DROP PUBLICATION IF EXISTS ${PUBLICATION}; CREATE PUBLICATION ${PUBLICATION} FOR TABLE ${SCHEMA}.${TABLE} WITH (publish = 'insert')`,
    );
    await this.pool.query(`SELECT pg_create_logical_replication_slot('${SLOT}', 'pgoutput')`);
  }

  /** Drops the slot (a forgotten logical slot would retain WAL forever), publication and table. */
  async teardown(): Promise<void> {
    await this.dropSlot().catch(() => undefined);
    await this.pool.query(`DROP PUBLICATION IF EXISTS ${PUBLICATION}`).catch(() => undefined);
    await this.pool.query(`DROP TABLE IF EXISTS ${SCHEMA}.${TABLE}`).catch(() => undefined);
    await this.pool.end();
  }

  private async dropSlot(): Promise<void> {
    for (let i = 0; i < 50; i++) {
      const { rows } = await this.pool.query<{ active: boolean }>(
        'SELECT active FROM pg_replication_slots WHERE slot_name = $1',
        [SLOT],
      );
      if (rows.length === 0) return;
      if (rows[0]?.active !== true) {
        await this.pool.query('SELECT pg_drop_replication_slot($1)', [SLOT]);
        return;
      }
      await sleep(200);
    }
    throw new Error(`replication slot ${SLOT} stays active`);
  }

  /** Empties the table and moves the slot past everything written so far. */
  async reset(): Promise<void> {
    await this.pool.query(`TRUNCATE ${SCHEMA}.${TABLE}`);
    for (let i = 0; i < 50; i++) {
      const { rows } = await this.pool.query<{ active: boolean }>(
        'SELECT active FROM pg_replication_slots WHERE slot_name = $1',
        [SLOT],
      );
      if (rows[0]?.active !== true) break;
      await sleep(200);
    }
    await this.pool.query('SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())', [SLOT]);
  }

  /**
   * Commits `count` messages (1 KiB JSON, 1 000 keys as segments) from `writers` concurrent
   * connections, 50 per transaction, the way an application's traffic fills the table.
   */
  async write(count: number, writers = 8, perTransaction = 50): Promise<void> {
    let next = 1;
    const writer = async (): Promise<void> => {
      const client = await this.pool.connect();
      try {
        for (;;) {
          const from = next;
          if (from > count) return;
          const to = Math.min(count, from + perTransaction - 1);
          next = to + 1;
          await client.query('BEGIN');
          await client.query(
            `INSERT INTO ${SCHEMA}.${TABLE} (id, aggregate_type, aggregate_id, message_type, segment, concurrency, payload)
SELECT gen_random_uuid(), 'order', 'k' || (g % $1), 'order.created', 'k' || (g % $1), 'sequential', ('{"seq":' || g || ',"key":"k' || (g % $1) || '","pad":"' || $2 || '"}')::jsonb
FROM generate_series($3::int, $4::int) AS g ORDER BY g`,
            [KEYS, PAD, from, to],
          );
          await client.query('COMMIT');
        }
      } finally {
        client.release();
      }
    };
    await Promise.all(Array.from({ length: writers }, writer));
  }

  /** Starts its listener; resolves to a stop function. */
  start(logger: CountingPgtoLogger): () => Promise<void> {
    const { channel, queue } = this;
    if (channel === undefined) throw new Error('no channel');
    const publisher: GeneralMessageHandler = {
      handle: (message: TransactionalMessage): Promise<void> =>
        new Promise<void>((resolve, reject) => {
          channel.publish(
            '',
            queue,
            Buffer.from(JSON.stringify(message.payload), 'utf8'),
            { persistent: true, messageId: message.id, contentType: 'application/json' },
            (error: unknown) =>
              error === null || error === undefined ? resolve() : reject(toError(error)),
          );
        }),
    };
    const config: ReplicationListenerConfig = {
      outboxOrInbox: 'outbox',
      dbListenerConfig: pgConfig(),
      settings: {
        dbSchema: SCHEMA,
        dbTable: TABLE,
        enableMaxAttemptsProtection: false,
        enablePoisonousMessageProtection: false,
        dbPublication: PUBLICATION,
        dbReplicationSlot: SLOT,
        // Not a speed setting: only how soon it reconnects when the previous run's slot is still in use.
        restartDelaySlotInUseInMs: 500,
      },
    };
    const [shutdown] = initializeReplicationMessageListener(config, publisher, logger, {
      concurrencyStrategy:
        this.mode === 'fast'
          ? createReplicationSemaphoreConcurrencyController(10)
          : createReplicationMutexConcurrencyController(),
      messageProcessingTimeoutStrategy: () => 2_000,
    });
    return shutdown;
  }

  private async dbNow(): Promise<number> {
    const { rows } = await this.pool.query<{ t: string }>(
      'SELECT extract(epoch FROM clock_timestamp()) * 1000 AS t',
    );
    return Number(rows[0]?.t);
  }

  private async progress(): Promise<{ processed: number; last: number | null }> {
    const { rows } = await this.pool.query<{ n: string; last: string | null }>(
      `SELECT count(*) AS n, extract(epoch FROM max(processed_at)) * 1000 AS last FROM ${SCHEMA}.${TABLE} WHERE processed_at IS NOT NULL`,
    );
    return {
      processed: Number(rows[0]?.n ?? 0),
      last: rows[0]?.last === null || rows[0]?.last === undefined ? null : Number(rows[0].last),
    };
  }

  /**
   * Backlog drain: the messages are committed first, then the listener starts; measures until
   * all are processed or nothing moved for `settleMs`.
   */
  async drainBacklog(count: number, settleMs: number): Promise<PgtoRun> {
    await this.reset();
    this.channel = (await this.link.get()).channel;
    await this.write(count);
    const logger = new CountingPgtoLogger();
    const t0 = await this.dbNow();
    const stop = this.start(logger);
    try {
      return await this.await(count, t0, settleMs, logger);
    } finally {
      await stop();
    }
  }

  /** Live: the listener runs while 8 writers commit `count` messages; counts what it never publishes. */
  async live(count: number, settleMs: number): Promise<PgtoRun> {
    await this.reset();
    this.channel = (await this.link.get()).channel;
    const logger = new CountingPgtoLogger();
    const t0 = await this.dbNow();
    const stop = this.start(logger);
    try {
      await sleep(500);
      await this.write(count, 8, 5);
      return await this.await(count, t0, settleMs, logger);
    } finally {
      await stop();
    }
  }

  private async await(
    count: number,
    t0: number,
    settleMs: number,
    logger: CountingPgtoLogger,
  ): Promise<PgtoRun> {
    let seen = -1;
    let lastMove = Date.now();
    let state = await this.progress();
    while (state.processed < count) {
      if (state.processed !== seen) {
        seen = state.processed;
        lastMove = Date.now();
      } else if (Date.now() - lastMove > settleMs) {
        break;
      }
      await sleep(200);
      state = await this.progress();
    }
    return {
      committed: count,
      processed: state.processed,
      seconds: state.last === null ? Number.NaN : (state.last - t0) / 1000,
      unprocessed: count - state.processed,
      warnings: Object.fromEntries(logger.warnings),
    };
  }
}
