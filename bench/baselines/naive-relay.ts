/**
 * Baseline (a): the relay of common blog posts. Selects 100 pending rows, then for each one
 * publishes it, waits for the broker's confirm and marks that row sent: two round trips per
 * message, nothing in flight in parallel.
 */
import type { ConfirmChannel } from 'amqplib';
import type { Pool } from '../support/pg';
import { toError } from '../support/stats';

export interface NaiveRelayOptions {
  readonly pool: Pool;
  readonly table: string;
  readonly channel: ConfirmChannel;
  readonly queue: string;
  /** Rows per select. @default 100 */
  readonly batchSize?: number;
}

interface Row {
  id: string;
  message_id: string;
  payload: string;
}

export async function naiveRelay(options: NaiveRelayOptions): Promise<number> {
  const { pool, table, channel, queue } = options;
  const client = await pool.connect();
  let published = 0;
  try {
    for (;;) {
      const { rows } = await client.query<Row>(
        `SELECT id::text AS id, message_id::text AS message_id, payload::text AS payload FROM "${table}" WHERE status = 'pending' ORDER BY id LIMIT $1`,
        [options.batchSize ?? 100],
      );
      if (rows.length === 0) return published;
      for (const row of rows) {
        await new Promise<void>((resolve, reject) => {
          channel.publish(
            '',
            queue,
            Buffer.from(row.payload, 'utf8'),
            { persistent: true, messageId: row.message_id, contentType: 'application/json' },
            (error: unknown) =>
              error === null || error === undefined ? resolve() : reject(toError(error)),
          );
        });
        await client.query(
          `UPDATE "${table}" SET status = 'delivered', delivered_at = now() WHERE id = $1`,
          [row.id],
        );
        published++;
      }
    }
  } finally {
    client.release();
  }
}
