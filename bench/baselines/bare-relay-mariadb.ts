/**
 * The bare pipelined relay (bare-relay.ts) on MariaDB: claim 500 pending rows (`SELECT … FOR
 * UPDATE SKIP LOCKED` in the pending index's order at READ COMMITTED, marked in the same transaction, as MariaDB has
 * no `UPDATE … RETURNING`), publish them with outstanding confirms (or one kafkajs `sendBatch`),
 * mark them delivered in one statement; two batches in flight. No leases, fencing, ordering or
 * retries: the ceiling of a relay on this table, for the log-tailing scenarios' MariaDB rows.
 */
import * as mysql from 'mysql2/promise';
import type { Producer } from 'kafkajs';
import { serverConnection } from '../../test/support/databases';
import { SERVICES } from '../support/config';
import type { ConfirmWindow } from '../support/rabbit';
import { BARE_BATCH_SIZE, rabbitProperties, type Row } from './bare-relay';

export function mariaPool(connections = 4): mysql.Pool {
  const { host, port, username, password } = serverConnection('mariadb');
  return mysql.createPool({
    host,
    port,
    user: username,
    password,
    database: SERVICES.mariadb.database,
    connectionLimit: connections,
  });
}

async function relay(
  pool: mysql.Pool,
  table: string,
  publishBatch: (rows: Row[]) => Promise<void>,
  depth = 2,
): Promise<number> {
  const t = `\`${table}\``;
  let published = 0;
  const lane = async (): Promise<void> => {
    const connection = await pool.getConnection();
    try {
      // As the module claims: at REPEATABLE READ the claim's locking read takes gap locks in
      // the pending index, and writers inserting beside it deadlock (L3's writers did).
      await connection.query('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED');
      for (;;) {
        const rows = await retried(async () => {
          await connection.beginTransaction();
          try {
            const [found] = await connection.query<(mysql.RowDataPacket & Row)[]>(
              `SELECT CAST(id AS CHAR) AS id, LOWER(INSERT(INSERT(INSERT(INSERT(HEX(message_id), 21, 0, '-'), 17, 0, '-'), 13, 0, '-'), 9, 0, '-')) AS message_id, topic, message_key, event_type, payload
FROM ${t} WHERE status = 'pending' AND locked_by IS NULL ORDER BY status, available_at, id LIMIT ? FOR UPDATE SKIP LOCKED`,
              [BARE_BATCH_SIZE],
            );
            if (found.length > 0) {
              await connection.query(`UPDATE ${t} SET locked_by = 'bare' WHERE id IN (?)`, [
                found.map((r) => r.id),
              ]);
            }
            await connection.commit();
            return found;
          } catch (error) {
            await connection.rollback().catch(() => undefined);
            throw error;
          }
        });
        if (rows.length === 0) return;
        await publishBatch(rows);
        await retried(() =>
          connection.query(
            `UPDATE ${t} SET status = 'delivered', delivered_at = UTC_TIMESTAMP(6), locked_by = NULL WHERE id IN (?)`,
            [rows.map((r) => r.id)],
          ),
        );
        published += rows.length;
      }
    } finally {
      connection.release();
    }
  };
  await Promise.all(Array.from({ length: depth }, lane));
  return published;
}

/**
 * Runs `fn` again when InnoDB chose it as a deadlock's victim: writers inserting beside the
 * relay's claim and settle (L2) take gap locks in another order, as any relay on MariaDB meets.
 */
async function retried<T>(fn: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (attempt >= 20 || (code !== 'ER_LOCK_DEADLOCK' && code !== 'ER_LOCK_WAIT_TIMEOUT'))
        throw error;
    }
  }
}

/** Drains the MariaDB table into `queue` through the confirm window; resolves to the number published. */
export function bareMariaRabbitRelay(options: {
  pool: mysql.Pool;
  table: string;
  window: ConfirmWindow;
  queue: string;
}): Promise<number> {
  let publishes = 0;
  return relay(options.pool, options.table, async (rows) => {
    await Promise.all(
      rows.map((r) =>
        options.window.publish(
          '',
          options.queue,
          Buffer.from(r.payload, 'utf8'),
          rabbitProperties(r, 'bare', ++publishes),
        ),
      ),
    );
  });
}

/** Drains the MariaDB table into a Kafka topic with one `sendBatch` per claimed batch. */
export function bareMariaKafkaRelay(options: {
  pool: mysql.Pool;
  table: string;
  producer: Producer;
  topic: string;
}): Promise<number> {
  return relay(options.pool, options.table, async (rows) => {
    await options.producer.sendBatch({
      acks: -1,
      topicMessages: [
        {
          topic: options.topic,
          messages: rows.map((r) => ({
            key: r.message_key,
            value: r.payload,
            headers: { 'x-outbox-message-id': r.message_id },
          })),
        },
      ],
    });
  });
}
