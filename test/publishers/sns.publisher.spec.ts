import { SNSClient } from '@aws-sdk/client-sns';
import { SQSClient } from '@aws-sdk/client-sqs';
import type { DataSource } from 'typeorm';
import {
  OutboxInvalidMessageError,
  PermanentPublishError,
  PublisherUnavailableError,
} from '../../lib';
import { messageIdFromSqs } from '../../lib/inbox';
import { SnsPublisher, type SnsPublisherOptions } from '../../lib/publishers/sns';
import { readOutboxSqsMessage } from '../../lib/publishers/sqs';
import { testDatabase, uniqueTable } from '../support/databases';
import {
  allSettled,
  dispatchUntil,
  openOutboxHarness,
  type HarnessOverrides,
  type OutboxHarness,
} from '../support/outbox-harness';
import { describeWith } from '../support/services';
import { FaultProxy } from '../../lib/testing';
import {
  abortGraceCases,
  startFauxqs,
  topicWithQueue,
  type Fauxqs,
  type SubscribedTopic,
} from '../support/transports/aws';
import { freePort } from '../support/transports/net';
import { sleep, waitFor } from '../support/wait-for';

// PostgreSQL → SnsPublisher → fauxqs (an SNS/SQS emulator from npm, run by this spec on a port of
// its own: no SNS-compatible server is installed on the machine) → an SQS queue subscribed to the
// topic → a ReceiveMessage consumer. Faults go through a TCP proxy in front of fauxqs.

const db = testDatabase('postgres');
type Harness = OutboxHarness<SnsPublisher>;

describeWith(['postgres'], 'SnsPublisher (PostgreSQL → fauxqs)', () => {
  let ds: DataSource;
  let fauxqs: Fauxqs;
  let sns: SNSClient;
  let sqs: SQSClient;
  const baseTable = uniqueTable('outbox_sns');
  const harnesses: Harness[] = [];
  const topics: SubscribedTopic[] = [];
  const proxies: FaultProxy[] = [];

  beforeAll(async () => {
    ds = await db.open(baseTable);
    fauxqs = await startFauxqs();
    sns = new SNSClient(fauxqs.snsConfig());
    sqs = new SQSClient(fauxqs.sqsConfig());
  });

  afterEach(async () => {
    await Promise.all(harnesses.splice(0).map((h) => h.close()));
    await Promise.all(topics.splice(0).map((t) => t.close()));
    await Promise.all(proxies.splice(0).map((p) => p.close()));
  });

  afterAll(async () => {
    sns?.destroy();
    sqs?.destroy();
    await fauxqs?.stop();
    if (ds !== undefined) await db.close(ds, baseTable);
  });

  async function topic(fifo: boolean, raw: boolean): Promise<SubscribedTopic> {
    const t = await topicWithQueue(sns, sqs, { fifo, raw });
    topics.push(t);
    return t;
  }

  /** A proxy in front of fauxqs, and the configuration of an SNS client that goes through it. */
  async function proxy(): Promise<{ proxy: FaultProxy; client: SnsPublisherOptions['client'] }> {
    const p = await FaultProxy.start(
      { host: '127.0.0.1', port: Number(new URL(fauxqs.endpoint).port) },
      { lifetimeMs: 120_000 },
    );
    proxies.push(p);
    return { proxy: p, client: { ...fauxqs.snsConfig(), endpoint: `http://127.0.0.1:${p.port}` } };
  }

  async function openOutbox(
    options: SnsPublisherOptions = {},
    overrides: HarnessOverrides = {},
  ): Promise<Harness> {
    const h = await openOutboxHarness(
      ds,
      new SnsPublisher({ client: fauxqs.snsConfig(), ...options }),
      overrides,
      'outbox_sns',
    );
    harnesses.push(h);
    return h;
  }

  it('delivers to a FIFO topic in per-key order, each once, with the same attributes as SQS (raw delivery) and inside SNS notifications (without)', async () => {
    const raw = await topic(true, true);
    const h = await openOutbox({}, { dispatcher: { batchSize: 50 } });
    const ids: string[] = [];
    for (let round = 0; round < 5; round++) {
      ids.push(
        ...(await h.enqueue(
          Array.from({ length: 10 }, (_, k) => ({
            topic: raw.topicArn,
            key: `k${k}`,
            type: 'order.updated',
            payload: { round },
            headers: { 'x-tenant': `t${k}` },
            attributes: { sns: { subject: 'Order updated' } },
          })),
        )),
      );
    }
    await dispatchUntil(h, 'drained', allSettled(h));
    const received = await raw.consumer.received.settle(ids.length, 500, 30_000);
    expect(received.map(messageIdFromSqs).sort()).toEqual([...ids].sort());
    const byKey = new Map<string, number[]>();
    for (const m of received) {
      const read = readOutboxSqsMessage(m);
      expect(read.viaSnsNotification).toBe(false);
      byKey.set(read.key ?? '', [
        ...(byKey.get(read.key ?? '') ?? []),
        (JSON.parse(read.payload as string) as { round: number }).round,
      ]);
    }
    for (const [, rounds] of byKey) expect(rounds).toEqual([0, 1, 2, 3, 4]);
    expect(readOutboxSqsMessage(received[0] as never)).toMatchObject({
      type: 'order.updated',
      headers: { 'x-tenant': expect.stringMatching(/^t\d$/) },
    });

    const notified = await topic(false, false);
    const [id] = await h.enqueue({
      topic: notified.topicArn,
      key: 'n',
      payload: Buffer.from('bytes'),
      contentType: 'application/octet-stream',
    });
    await dispatchUntil(h, 'drained', allSettled(h));
    const [envelope] = await notified.consumer.received.settle(1);
    expect(messageIdFromSqs(envelope as never)).toBe(id);
    expect(readOutboxSqsMessage(envelope as never)).toMatchObject({
      messageId: id,
      viaSnsNotification: true,
      contentType: 'application/octet-stream',
      payload: Buffer.from('bytes'),
    });
  });

  it('refuses at enqueue a topic that is not an ARN, and a message whose body fits the module limit but not SNS with its attributes; nothing is written', async () => {
    const h = await openOutbox();
    await expect(h.enqueue({ topic: 'orders', payload: {} })).rejects.toMatchObject({
      reason: 'invalid-topic',
    });
    const arn = 'arn:aws:sns:us-east-1:000000000000:orders';
    const big = h.enqueue({ topic: arn, payload: { text: 'x'.repeat(262_100) } });
    await expect(big).rejects.toBeInstanceOf(OutboxInvalidMessageError);
    await expect(big).rejects.toMatchObject({ reason: 'payload-too-large' });
    expect(await h.rows()).toEqual([]);
  });

  it('takes a message past 256 KiB at enqueue when maxMessageBytes follows a larger topic MaximumMessageSize; a topic that refuses it dead-letters it alone', async () => {
    const t = await topic(false, true);
    // The default refuses it: a topic takes 256 KiB unless its MaximumMessageSize says more.
    const strict = await openOutbox();
    const refused = strict.enqueue({ topic: t.topicArn, payload: { text: 'x'.repeat(300_000) } });
    await expect(refused).rejects.toMatchObject({ reason: 'payload-too-large' });
    // Raised to SNS's 1 MiB, it is written. fauxqs keeps every topic at 256 KiB (it reads no
    // MaximumMessageSize), so here SNS refuses it as a topic left at the default would: it is
    // dead-lettered at once, alone, and its neighbours are published.
    const h = await openOutbox(
      { maxMessageBytes: 1_048_576 },
      { maxPayloadBytes: 1_048_576, dispatcher: { batchSize: 20 } },
    );
    const small = await h.enqueue(
      Array.from({ length: 4 }, (_, k) => ({ topic: t.topicArn, key: `k${k}`, payload: { k } })),
    );
    const [big] = await h.enqueue({
      topic: t.topicArn,
      key: 'big',
      payload: { text: 'x'.repeat(300_000) },
    });
    await dispatchUntil(h, 'settled', allSettled(h));
    const rows = await h.rows();
    expect(rows.filter((r) => r.status === 'dead').map((r) => r.messageId)).toEqual([big]);
    expect(rows.filter((r) => r.status === 'delivered')).toHaveLength(small.length);
    const received = await t.consumer.received.settle(small.length);
    expect(received).toHaveLength(small.length);
  });

  it('the server gone mid-drain and back: nothing lost, no attempt burnt, delivery resumes', async () => {
    const t = await topic(true, true);
    const { proxy: p, client } = await proxy();
    const h = await openOutbox(
      { client },
      { dispatcher: { batchSize: 20, publishTimeoutMs: 2_000, maxOutagePauseMs: 500 } },
    );
    const ids: string[] = [];
    for (let round = 0; round < 20; round++) {
      ids.push(
        ...(await h.enqueue(
          Array.from({ length: 50 }, (_, k) => ({
            topic: t.topicArn,
            key: `k${k}`,
            payload: { round },
          })),
        )),
      );
    }
    let stop = false;
    const dispatching = (async () => {
      while (!stop) {
        await h.dispatcher.drain();
        await sleep(20);
      }
    })();
    try {
      await waitFor(
        'three batches delivered',
        async () => (await h.rows()).filter((r) => r.status === 'delivered').length >= 60,
        { timeoutMs: 30_000, intervalMs: 10 },
      );
      p.cut('reset');
      const outagesAtCut = h.outages.length;
      await waitFor('the dispatcher to meet the outage', () => h.outages.length > outagesAtCut, {
        timeoutMs: 15_000,
      });
      const during = await h.rows();
      expect(during.some((r) => r.status === 'pending')).toBe(true);
      expect(during.every((r) => r.status !== 'dead' && r.attempts <= 1)).toBe(true);
      await sleep(1_000);
      const deliveredBefore = (await h.rows()).filter((r) => r.status === 'delivered').length;
      p.restore();
      await waitFor(
        'delivery to resume after the server returns',
        async () =>
          (await h.rows()).filter((r) => r.status === 'delivered').length > deliveredBefore,
        { timeoutMs: 3_000, intervalMs: 20 },
      );
      await waitFor('every row delivered', allSettled(h), { timeoutMs: 60_000 });
    } finally {
      stop = true;
      await dispatching;
    }
    const received = await t.consumer.received.settle(ids.length, 500, 30_000);
    expect((await h.rows()).every((r) => r.status === 'delivered' && r.attempts <= 2)).toBe(true);
    expect(received.map(messageIdFromSqs).sort()).toEqual([...ids].sort());
    expect(h.outages.every((e) => e instanceof PublisherUnavailableError)).toBe(true);
  }, 120_000);

  describe('publish() driven directly', () => {
    describe('aborted with the batch in the subscribed queue and the answer to its call held back (a proxy)', () => {
      it.each(abortGraceCases())('$name', async (c) => {
        const t = await topic(false, true);
        const { proxy: p, client } = await proxy();
        const publisher = new SnsPublisher({ client });
        try {
          const target = {
            proxy: p,
            call: /PublishBatch/,
            publisher,
            destination: t.topicArn,
            received: t.consumer.received,
          };
          expect(await c.run(target)).toEqual(c.expected);
        } finally {
          await publisher.close();
        }
      });
    });

    it('a missing topic fails its messages permanently; nothing listening is an outage never sent, and ping() rejects', async () => {
      const missing = new SnsPublisher({
        client: fauxqs.snsConfig(),
        topicArn: 'arn:aws:sns:us-east-1:000000000000:never-created',
      });
      const down = new SnsPublisher({
        client: { ...fauxqs.snsConfig(), endpoint: `http://127.0.0.1:${await freePort()}` },
        topicArn: 'arn:aws:sns:us-east-1:000000000000:any',
      });
      const record = {
        id: '1',
        messageId: '00000000-0000-7000-8000-000000000001',
        topic: 'ignored',
        key: 'k',
        type: 't',
        payload: '{}',
        headers: {},
        attempts: 1,
        createdAt: new Date(),
      };
      try {
        const [gone] = await missing.publish([record], new AbortController().signal);
        expect((gone as { error: unknown }).error).toBeInstanceOf(PermanentPublishError);
        const [refused] = await down.publish([record], new AbortController().signal);
        expect(refused).toMatchObject({ ok: false, sent: false });
        expect((refused as { error: unknown }).error).toBeInstanceOf(PublisherUnavailableError);
        await expect(down.ping(AbortSignal.timeout(5_000))).rejects.toBeInstanceOf(
          PublisherUnavailableError,
        );
        const t = await topic(false, true);
        const up = new SnsPublisher({ client: fauxqs.snsConfig(), topicArn: t.topicArn });
        await expect(up.ping(AbortSignal.timeout(5_000))).resolves.toBeUndefined();
        await up.close();
      } finally {
        await missing.close();
        await down.close();
      }
    });
  });
});
