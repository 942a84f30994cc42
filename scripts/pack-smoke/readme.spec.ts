// A vitest spec in the ES module app, as a Nest 12 project tests: nestjs-outbox/testing's
// RecordingPublisher and the README's event class load and work under vitest.
import 'reflect-metadata';
import { describe, expect, it } from 'vitest';
import { getOutboxEventMetadata } from 'nestjs-outbox';
import { RecordingPublisher } from 'nestjs-outbox/testing';
import { OrderCreated } from './order-created.event.js';

describe('nestjs-outbox under vitest', () => {
  it('reads the README event metadata and records a publish', async () => {
    expect(getOutboxEventMetadata(new OrderCreated('o-1', 42))).toMatchObject({ topic: 'orders' });
    const publisher = new RecordingPublisher();
    const record = {
      id: '1',
      messageId: '0190a6b2-1c3d-7e4f-8a9b-0c1d2e3f4a5b',
      topic: 'orders',
      key: 'o-1',
      type: 'order.created',
      payload: '{"orderId":"o-1","total":42}',
      headers: {},
      attempts: 1,
      createdAt: new Date(),
    };
    expect(await publisher.publish([record], new AbortController().signal)).toEqual([{ ok: true }]);
    expect(publisher.payloads({ type: 'order.created' })).toEqual([{ orderId: 'o-1', total: 42 }]);
  });
});
