/**
 * Baseline (b): a bare pipelined relay. Claims N rows in one UPDATE … RETURNING statement,
 * publishes them all with outstanding confirms (RabbitMQ, up to 1 000 in flight across two
 * overlapping batches) or one kafkajs `sendBatch`, and settles the batch in one statement.
 * No leases, no fencing, no per-key order, no retries: the upper bound of a relay on this table.
 * With `leases`, the same relay keeps the module's lease promises (lease, fencing token, attempt
 * count, its claim's columns): the lease relay, between the bare relay and the module in P2.
 */
import { randomUUID } from 'node:crypto';
import type { Options } from 'amqplib';
import type { Producer } from 'kafkajs';
import {
  OUTBOX_HEADER_KEY,
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
} from '../../lib/outbox.constants';
import { RABBITMQ_PUBLISH_ID_HEADER } from '../../lib/publishers/rabbitmq/rabbitmq-publish-id';
import { POSTGRES_CLAIMED_COLUMNS, claimable } from '../../lib/store/postgres/postgres.sql';
import type { Pool } from '../support/pg';
import type { ConfirmWindow } from '../support/rabbit';

/** Rows per claim when the caller sets none. */
export const BARE_BATCH_SIZE = 500;

export interface BareRelayOptions {
  readonly pool: Pool;
  readonly table: string;
  /** Rows per claim. @default 500 */
  readonly batchSize?: number;
  /** Batches in flight at once (claim of the next overlaps publishing of the current). @default 2 */
  readonly depth?: number;
  /**
   * How a published batch is settled: `mark` sets its rows delivered, `delete` deletes them (the
   * module's two settle modes: `cleaner.deliveredRetentionMs` above 0, and 0). @default 'mark'
   */
  readonly settle?: 'mark' | 'delete';
  /**
   * Keeps the module's lease promises (see {@link leaseClaimSql}): the lease relay, the floor of a
   * relay that leases, fences and counts attempts as the module does, with nothing else of it.
   * @default false
   */
  readonly leases?: boolean;
}

/** A claimed row, as the bare relays read it. */
export interface Row {
  id: string;
  message_id: string;
  topic: string;
  message_key: string | null;
  event_type: string;
  payload: string;
}

/**
 * The claim of 500 in one statement. In the order of the table's pending index (the seeds share
 * one `available_at`, so that is id order): ordered by id alone, the claim walked the primary key
 * past every row the relay had already marked delivered, a cost that grew through the drain and
 * that no relay on this table has to pay (P1, P2: marking ran at 0.75–0.85 × deleting).
 */
export function bareClaimSql(table: string): string {
  return `WITH c AS MATERIALIZED (
  SELECT id FROM "${table}" WHERE status = 'pending' AND locked_by IS NULL ORDER BY available_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
UPDATE "${table}" AS o SET locked_by = 'bare' FROM c WHERE o.id = c.id
RETURNING o.id::text AS id, o.message_id::text AS message_id, o.topic, o.message_key, o.event_type, o.payload::text AS payload`;
}

/** The settle of a batch in one statement, by the batch's ids (`$1`). */
export function bareSettleSql(table: string, mode: 'mark' | 'delete' = 'mark'): string {
  if (mode === 'delete') return `DELETE FROM "${table}" WHERE id = ANY($1::int8[])`;
  return `UPDATE "${table}" SET status = 'delivered', delivered_at = now(), locked_by = NULL WHERE id = ANY($1::int8[])`;
}

/**
 * The lease relay's claim: the bare claim's read (the pending index, `FOR UPDATE SKIP LOCKED`)
 * with what the module's claim writes and returns for its lease promises: owner, a fresh fencing
 * token, a lease on the database clock, the attempt counted, every column the module's claim
 * returns; rows whose lease expired are claimable again. $1 limit, $2 token. No window, no key
 * probes, no ordering: what the module's claim costs beyond it is the ordering's and its own.
 */
export function leaseClaimSql(table: string): string {
  return `WITH c AS MATERIALIZED (
  SELECT c.id, c.ctid FROM "${table}" AS c WHERE ${claimable('c')}
  ORDER BY c.available_at, c.id LIMIT $1 FOR UPDATE OF c SKIP LOCKED)
UPDATE "${table}" AS o SET locked_by = 'lease-relay', lock_token = $2::uuid,
  locked_until = now() + interval '30 seconds', attempts = o.attempts + 1, last_attempt_at = now()
FROM c WHERE o.ctid = c.ctid AND o.id = c.id
RETURNING ${POSTGRES_CLAIMED_COLUMNS}`;
}

/** The lease relay's settle, fenced by the claim's token (`$2`) as the module's is. */
export function leaseSettleSql(table: string, mode: 'mark' | 'delete' = 'mark'): string {
  if (mode === 'delete') {
    return `DELETE FROM "${table}" WHERE id = ANY($1::int8[]) AND lock_token = $2::uuid`;
  }
  return `UPDATE "${table}" SET status = 'delivered', delivered_at = now(), locked_by = NULL, lock_token = NULL, locked_until = NULL
WHERE id = ANY($1::int8[]) AND lock_token = $2::uuid`;
}

async function relay(
  options: BareRelayOptions,
  publishBatch: (rows: Row[]) => Promise<void>,
): Promise<number> {
  const batchSize = options.batchSize ?? BARE_BATCH_SIZE;
  const mode = options.settle ?? 'mark';
  const leases = options.leases ?? false;
  const kind = leases ? 'lease' : 'bare';
  const claim = leases ? leaseClaimSql(options.table) : bareClaimSql(options.table);
  const settle = leases ? leaseSettleSql(options.table, mode) : bareSettleSql(options.table, mode);
  let published = 0;
  const lane = async (): Promise<void> => {
    const client = await options.pool.connect();
    try {
      for (;;) {
        const values: unknown[] = leases ? [batchSize, randomUUID()] : [batchSize];
        const { rows } = await client.query<Row>({
          name: `${kind}-claim-${options.table}`,
          text: claim,
          values,
        });
        if (rows.length === 0) return;
        await publishBatch(rows);
        const ids = rows.map((r) => r.id);
        await client.query({
          name: `${kind}-settle-${mode}-${options.table}`,
          text: settle,
          values: leases ? [ids, values[1]] : [ids],
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

/**
 * The AMQP properties of a message: `bare`, the least a consumer needs; `outbox`, the same ones
 * RabbitMqPublisher sends (mandatory, message id, type, timestamp, content type and encoding, the
 * four `x-outbox-*` headers), so that the bench can tell what the promises cost at the broker
 * from what the relay itself spends. Two more split the `outbox` set: `outbox-no-headers`, every
 * one of those properties but the headers (what RabbitMqPublisher sends with `outboxHeaders:
 * false`); `bare-one-header`, `bare` with one header (`x-outbox-publish-id`): whether headers
 * cost by their number or from the first one (amqplib sends an empty table either way).
 */
export type BareProperties = 'bare' | 'outbox' | 'outbox-no-headers' | 'bare-one-header';

/** The AMQP properties a bare relay sends for `kind` (see {@link BareProperties}). */
export function rabbitProperties(r: Row, kind: BareProperties, publishId: number): Options.Publish {
  // Each set as one object literal, as a relay written by hand would build it: spreads made
  // objects that amqplib read more slowly, which charged the baseline for its own construction.
  switch (kind) {
    case 'bare':
      return { persistent: true, messageId: r.message_id, contentType: 'application/json' };
    case 'bare-one-header':
      return {
        persistent: true,
        messageId: r.message_id,
        contentType: 'application/json',
        headers: { [RABBITMQ_PUBLISH_ID_HEADER]: String(publishId) },
      };
    case 'outbox-no-headers':
      return outboxProperties(r, undefined);
    case 'outbox': {
      const headers: Record<string, string> = {
        [OUTBOX_HEADER_MESSAGE_ID]: r.message_id,
        [OUTBOX_HEADER_TYPE]: r.event_type,
        [RABBITMQ_PUBLISH_ID_HEADER]: String(publishId),
      };
      if (r.message_key !== null) headers[OUTBOX_HEADER_KEY] = r.message_key;
      return outboxProperties(r, headers);
    }
  }
}

/**
 * The properties RabbitMqPublisher sends, with or without headers: amqplib writes the same frame
 * for `headers: undefined` as for no headers option.
 */
function outboxProperties(r: Row, headers: Record<string, string> | undefined): Options.Publish {
  return {
    persistent: true,
    messageId: r.message_id,
    contentType: 'application/json',
    mandatory: true,
    type: r.event_type,
    timestamp: Math.floor(Date.now() / 1000),
    contentEncoding: 'utf-8',
    headers,
  };
}

/** Drains the table into `queue` through the confirm window; resolves to the number published. */
export function bareRabbitRelay(
  options: BareRelayOptions & {
    window: ConfirmWindow;
    queue: string;
    /** @default 'bare' */
    properties?: BareProperties;
  },
): Promise<number> {
  let publishes = 0;
  return relay(options, async (rows) => {
    await Promise.all(
      rows.map((r) =>
        options.window.publish(
          '',
          options.queue,
          Buffer.from(r.payload, 'utf8'),
          rabbitProperties(r, options.properties ?? 'bare', ++publishes),
        ),
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
