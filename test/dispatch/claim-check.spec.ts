import { connect, type ChannelModel, type ConsumeMessage } from 'amqplib';
import { S3Client, type PutObjectCommandInput } from '@aws-sdk/client-s3';
import type { DataSource } from 'typeorm';
import type { OutboxRecord } from '../../lib';
import { OutboxAuditStore } from '../../lib/admin';
import { OUTBOX_SQL } from '../../lib/outbox.constants';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import {
  OUTBOX_HEADER_CLAIM_CHECK,
  OUTBOX_HEADER_CLAIM_CHECK_ID,
  tableClaimCheckStore,
  type ClaimCheckStore,
} from '../../lib/claim-check';
import { claimCheckPayload } from '../../lib/inbox';
import { s3ClaimCheckStore } from '../../lib/integrations/s3';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { storedId, uniqueTable } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeSource, SOURCE_CASES, useSource } from '../support/sources';
import { RABBITMQ_URL } from '../support/transports/native-consumers';
import { bucketKeys, createBucket, startS3rver, type S3rver } from '../support/transports/s3';
import { waitFor } from '../support/wait-for';

// The claim check (docs/claim-check.md) on each database and source: a payload over its type's
// threshold is written to the store once, under its message id, and the broker gets a reference
// that the consumer's one call turns back into the payload; a retry or a re-drive copy writes
// no second copy; the payload is deleted with the last message that sent it.

const big = (n: number): { n: number; text: string } => ({ n, text: 'x'.repeat(2_000) });

/** An S3 client that counts the PutObject calls it sends, by key. */
function countingClient(server: S3rver): { client: S3Client; puts: string[] } {
  const client = new S3Client(server.config());
  const puts: string[] = [];
  client.middlewareStack.add(
    (next, context) => (args) => {
      if (context.commandName === 'PutObjectCommand') {
        puts.push((args.input as PutObjectCommandInput).Key ?? '');
      }
      return next(args);
    },
    { step: 'initialize', name: 'countPuts' },
  );
  return { client, puts };
}

/** The rows of the claim-check table beside `table`. */
async function claimRows(
  ds: DataSource,
  table: string,
): Promise<{ blob_id: string; message_id: string; location: string; payload: unknown }[]> {
  const quoted = ds.driver.escape(`${table}_claim_checks`);
  return ds.query(`SELECT blob_id, message_id, location, payload FROM ${quoted}`);
}

let s3: S3rver;
beforeAll(async () => {
  s3 = await startS3rver();
});
afterAll(async () => {
  await s3?.stop();
});

for (const source of SOURCE_CASES) {
  describeSource(
    source,
    'claim check',
    () => {
      const scope = useOutboxScope(source.db, { tablePrefix: 'outbox_cc' });
      const src = useSource(scope, source);
      let amqp: ChannelModel | undefined;

      beforeAll(async () => {
        amqp = await connect(RABBITMQ_URL);
      });
      afterAll(async () => {
        await amqp?.close().catch(() => undefined);
      });

      it('sends payloads over the threshold to S3 and a reference to RabbitMQ, which the consumer turns back into the payload in one call', async () => {
        const { client, puts } = countingClient(s3);
        scope.defer(() => Promise.resolve(client.destroy()));
        const bucket = await createBucket(client);
        const store = s3ClaimCheckStore({ client, bucket, prefix: 'orders/' });
        const queue = uniqueTable('outbox_cc_q');
        const rabbit = new RabbitMqPublisher({
          url: RABBITMQ_URL,
          assertTopology: async (channel) => {
            await channel.assertQueue(queue, { durable: true });
          },
        });
        const h = await src.boot(rabbit, { claimCheck: { store, thresholdBytes: 1_000 } });
        const channel = await amqp!.createChannel();
        scope.defer(async () => {
          await channel.deleteQueue(queue).catch(() => undefined);
          await channel.close().catch(() => undefined);
        });
        await channel.assertQueue(queue, { durable: true });
        const received: ConsumeMessage[] = [];
        await channel.consume(queue, (m) => {
          if (m === null) return;
          received.push(m);
          channel.ack(m);
        });

        const ids = await h.commit([
          { topic: queue, key: 'k1', type: 'order.report', payload: big(1) },
          { topic: queue, key: 'k1', type: 'order.small', payload: { n: 2 } },
          {
            topic: queue,
            key: 'k2',
            type: 'order.pdf',
            contentType: 'application/pdf',
            payload: Buffer.alloc(3_000, 7),
          },
        ]);
        await src.deliver(h, 'every message delivered', async () =>
          (await h.rows()).every((r) => r.status === 'delivered'),
        );
        await waitFor('three messages consumed', () => received.length === 3);

        // What the broker carried: references for the two large payloads, the small one as is.
        const byId = new Map(received.map((m) => [String(m.properties.messageId), m]));
        const report = byId.get(ids[0]!)!;
        const small = byId.get(ids[1]!)!;
        const pdf = byId.get(ids[2]!)!;
        expect(report.content.length).toBeLessThan(1_000);
        expect(JSON.parse(report.content.toString())).toMatchObject({
          claimCheck: { blobId: ids[0], contentType: 'application/json' },
        });
        expect(report.properties.headers?.[OUTBOX_HEADER_CLAIM_CHECK]).toMatch(
          new RegExp(`^s3://${bucket}/orders/${ids[0]}/`),
        );
        expect(small.properties.headers?.[OUTBOX_HEADER_CLAIM_CHECK]).toBeUndefined();
        expect(pdf.properties.headers?.[OUTBOX_HEADER_CLAIM_CHECK_ID]).toBe(ids[2]);

        // The consumer's one call: from the store, or from the message itself.
        const reportPayload = await claimCheckPayload(report, store);
        expect(reportPayload.fromStore).toBe(true);
        expect(reportPayload.json()).toEqual(big(1));
        const smallPayload = await claimCheckPayload(small, store);
        expect(smallPayload.fromStore).toBe(false);
        expect(smallPayload.json()).toEqual({ n: 2 });
        const pdfPayload = await claimCheckPayload(pdf, store);
        expect(pdfPayload.contentType).toBe('application/pdf');
        expect(pdfPayload.bytes.equals(Buffer.alloc(3_000, 7))).toBe(true);

        // One object per large payload, each written once.
        expect(puts).toHaveLength(2);
        expect(await bucketKeys(client, bucket)).toEqual([...puts].sort());
        // The table keeps the row (its message's payload too, for the admin and re-drives).
        const rows = await h.rows();
        expect(JSON.stringify(rows.find((r) => r.messageId === ids[0])?.payload)).toContain('xxxx');
      });

      it('a retry and a re-drive copy send the stored payload without writing it again', async () => {
        const { client, puts } = countingClient(s3);
        scope.defer(() => Promise.resolve(client.destroy()));
        const bucket = await createBucket(client);
        const store = s3ClaimCheckStore({ client, bucket });
        const publisher = new RecordingPublisher();
        // The first publish fails after the payload was stored: the retry must not store it again.
        publisher.failNext('retryable');
        const h = await src.boot(
          publisher,
          {
            claimCheck: { store, thresholdBytes: 1_000 },
            retry: { initialDelayMs: 50, maxDelayMs: 50, jitter: 0 },
          },
          { sweepIntervalMs: 200 },
        );
        const [id] = await h.commit([
          { topic: 'orders', key: 'k1', type: 'order.report', payload: big(1) },
        ]);
        await src.deliver(h, 'the message delivered after its retry', async () =>
          (await h.rows()).every((r) => r.status === 'delivered'),
        );
        expect(publisher.attemptsOf(id!)).toBe(2);
        const audit = new OutboxAuditStore(h.moduleRef.get<SqlPort>(OUTBOX_SQL), {
          tableName: uniqueTable('outbox_cc_aud'),
        });
        await audit.ensure();
        scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS ${audit.names.table}`));
        const report = await h.admin.redrive(
          { topic: 'orders' },
          { actor: 'test', reason: 'replay', auditTable: { tableName: audit.names.tableName } },
        );
        expect(report.count).toBe(1);
        await src.deliver(h, 'the copy delivered', async () => {
          const rows = await h.rows();
          return rows.length === 2 && rows.every((r) => r.status === 'delivered');
        });

        const sent = publisher.sent.filter((r: OutboxRecord) => r.encoding !== 'binary');
        expect(sent).toHaveLength(2);
        const locations = sent.map((r) => r.headers[OUTBOX_HEADER_CLAIM_CHECK]);
        expect(locations[0]).toBeDefined();
        expect(locations[1]).toBe(locations[0]);
        expect(sent.map((r) => r.headers[OUTBOX_HEADER_CLAIM_CHECK_ID])).toEqual([id, id]);
        expect(puts).toHaveLength(1);
        expect(await bucketKeys(client, bucket)).toHaveLength(1);
        // The payload's owner is now the copy: it lives as long as the copy.
        const [row] = await claimRows(scope.ds, h.table);
        expect(String(row?.message_id).toLowerCase()).toBe(sent[1]?.messageId);
        expect((await claimCheckPayload(sent[1], store)).json()).toEqual(big(1));
      });

      it('keeps the payload in the outbox database with the table store, and the cleaner deletes it with its last message', async () => {
        const publisher = new RecordingPublisher();
        const h = await src.boot(publisher, {
          claimCheck: { store: tableClaimCheckStore(), thresholdBytes: 1_000 },
          cleaner: { deliveredRetentionMs: 60_000 },
        });
        const [id, kept] = await h.commit([
          { topic: 'orders', key: 'k1', type: 'order.report', payload: big(1) },
          { topic: 'orders', key: 'k2', type: 'order.report', payload: big(2) },
        ]);
        await src.deliver(h, 'both delivered', async () =>
          (await h.rows()).every((r) => r.status === 'delivered'),
        );
        const reader = tableClaimCheckStore({ dataSource: scope.ds, tableName: h.table });
        const [first] = publisher.sent;
        expect(first?.headers[OUTBOX_HEADER_CLAIM_CHECK]).toBe(`outbox-table:${first?.messageId}`);
        expect((await claimCheckPayload(first, reader)).json()).toEqual(
          first?.messageId === id ? big(1) : big(2),
        );
        expect(await claimRows(scope.ds, h.table)).toHaveLength(2);

        // The first message leaves the table (past its retention); the payload follows it once
        // no publish can still be sending it (its row untouched for twice the lease).
        const quoted = scope.ds.driver.escape(h.table);
        const cc = scope.ds.driver.escape(`${h.table}_claim_checks`);
        const p = source.db.name === 'postgres' ? '$1' : '?';
        await scope.ds.query(`DELETE FROM ${quoted} WHERE message_id = ${p}`, [
          storedId(scope.ds.options.type, id!),
        ]);
        const report = await h.cleaner.runOnce();
        expect(report.claimChecks).toBe(0);
        await scope.ds.query(
          source.db.name === 'sqlite'
            ? `UPDATE ${cc} SET touched_at = '2000-01-01 00:00:00.000'`
            : `UPDATE ${cc} SET touched_at = touched_at - INTERVAL '1' DAY`,
        );
        expect((await h.cleaner.runOnce()).claimChecks).toBe(1);
        const left = await claimRows(scope.ds, h.table);
        expect(left.map((r) => String(r.blob_id).toLowerCase())).toEqual([kept]);
        await expect(
          claimCheckPayload(
            publisher.sent.find((r) => r.messageId === id),
            reader,
          ),
        ).rejects.toThrow(/not in the table store/);
      });

      it('deletes the S3 object with the last message that sent it, and writes nothing for a rolled-back enqueue', async () => {
        const { client } = countingClient(s3);
        scope.defer(() => Promise.resolve(client.destroy()));
        const bucket = await createBucket(client);
        const store: ClaimCheckStore = s3ClaimCheckStore({ client, bucket });
        const publisher = new RecordingPublisher();
        const h = await src.boot(publisher, { claimCheck: { store, thresholdBytes: 1_000 } });
        await expect(
          scope.ds.transaction(async (manager) => {
            await h.outbox.enqueue(
              { topic: 'orders', key: 'k0', type: 'order.report', payload: big(0) },
              manager,
            );
            throw new Error('rolled back');
          }),
        ).rejects.toThrow('rolled back');
        const [id] = await h.commit([
          { topic: 'orders', key: 'k1', type: 'order.report', payload: big(1) },
        ]);
        await src.deliver(h, 'delivered', async () =>
          (await h.rows()).every((r) => r.status === 'delivered'),
        );
        expect(publisher.sentIds).toEqual([id]);
        expect(await bucketKeys(client, bucket)).toHaveLength(1);
        const quoted = scope.ds.driver.escape(h.table);
        const cc = scope.ds.driver.escape(`${h.table}_claim_checks`);
        await scope.ds.query(`DELETE FROM ${quoted}`);
        await scope.ds.query(
          source.db.name === 'sqlite'
            ? `UPDATE ${cc} SET touched_at = '2000-01-01 00:00:00.000'`
            : `UPDATE ${cc} SET touched_at = touched_at - INTERVAL '1' DAY`,
        );
        expect((await h.cleaner.runOnce()).claimChecks).toBe(1);
        expect(await bucketKeys(client, bucket)).toEqual([]);
        expect(await claimRows(scope.ds, h.table)).toEqual([]);
      });
    },
    ['rabbitmq'],
  );
}
