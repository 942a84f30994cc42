/**
 * Baseline (b): a bare pipelined relay. Claims N rows in one UPDATE … RETURNING statement,
 * publishes them all with outstanding confirms (RabbitMQ, up to 1 000 in flight across two
 * overlapping batches) or one kafkajs `sendBatch`, and settles the batch in one statement.
 * No leases, no fencing, no per-key order, no retries: the upper bound of a relay on this table.
 */
import type { Producer } from 'kafkajs';
import type { Pool } from '../support/pg';
import type { ConfirmWindow } from '../support/rabbit';

export interface BareRelayOptions {
  readonly pool: Pool;
  readonly table: string;
  /** Rows per claim. @default 500 */
  readonly batchSize?: number;
  /** Batches in flight at once (claim of the next overlaps publishing of the current). @default 2 */
  readonly depth?: number;
}

interface Row {
  id: string;
  message_id: string;
  topic: string;
  message_key: string | null;
  payload: string;
}

function claimSql(table: string): string {
  return `WITH c AS MATERIALIZED (
  SELECT id FROM "${table}" WHERE status = 'pending' AND locked_by IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
UPDATE "${table}" AS o SET locked_by = 'bare' FROM c WHERE o.id = c.id
RETURNING o.id::text AS id, o.message_id::text AS message_id, o.topic, o.message_key, o.payload::text AS payload`;
}

function settleSql(table: string): string {
  return `UPDATE "${table}" SET status = 'delivered', delivered_at = now(), locked_by = NULL WHERE id = ANY($1::int8[])`;
}

async function relay(
  options: BareRelayOptions,
  publishBatch: (rows: Row[]) => Promise<void>,
): Promise<number> {
  const batchSize = options.batchSize ?? 500;
  const claim = claimSql(options.table);
  const settle = settleSql(options.table);
  let published = 0;
  const lane = async (): Promise<void> => {
    const client = await options.pool.connect();
    try {
      for (;;) {
        const { rows } = await client.query<Row>({
          name: `bare-claim-${options.table}`,
          text: claim,
          values: [batchSize],
        });
        if (rows.length === 0) return;
        await publishBatch(rows);
        await client.query({
          name: `bare-settle-${options.table}`,
          text: settle,
          values: [rows.map((r) => r.id)],
        });
        published += rows.length;
      }
    } finally {
      client.release();
    }
  };
  await Promise.all(Array.from({ length: options.depth ?? 2 }, lane));
  return published;
}

/** Drains the table into `queue` through the confirm window; resolves to the number published. */
export function bareRabbitRelay(
  options: BareRelayOptions & { window: ConfirmWindow; queue: string },
): Promise<number> {
  return relay(options, async (rows) => {
    await Promise.all(
      rows.map((r) =>
        options.window.publish('', options.queue, Buffer.from(r.payload, 'utf8'), {
          persistent: true,
          messageId: r.message_id,
          contentType: 'application/json',
        }),
      ),
    );
  });
}

/** Drains the table into a Kafka topic with one `sendBatch` per claimed batch. */
export function bareKafkaRelay(
  options: BareRelayOptions & { producer: Producer; topic: string },
): Promise<number> {
  return relay(options, async (rows) => {
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
