import { Injectable } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { OnOutboxMessage, type OutboxHandlerMessage } from '../../lib';
import { CapturingLogger } from '../support/capturing-logger';
import { testDatabase } from '../support/databases';
import { openLocalApp, type LocalApp } from './local-app';

// A failing in-process handler says why in the log at its first failed attempt, with the
// message's facts as fields, before the message is ever dead-lettered.

describe('in-process handler failures in the log (sqlite)', () => {
  const db = testDatabase('sqlite');
  let ds: DataSource;
  let app: LocalApp | undefined;
  beforeAll(async () => {
    ds = await db.open('outbox_local_logs_base');
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });
  afterAll(async () => {
    await db.close(ds, 'outbox_local_logs_base');
  });

  it('logs the handler error of a failed attempt at warn, with the message facts as fields', async () => {
    @Injectable()
    class Stock {
      @OnOutboxMessage('stock')
      on(message: OutboxHandlerMessage<{ sku: string }>): void {
        throw new RangeError(`stock of ${message.payload.sku} below zero`);
      }
    }
    const logger = new CapturingLogger();
    app = await openLocalApp(ds, { handlers: [Stock], logger });
    const [id] = await app.commit([
      { topic: 'stock', key: 'sku-7', type: 'StockTaken', payload: { sku: 'sku-7' } },
    ]);
    await app.dispatcher.runOnce();

    const row = await app.row(id ?? '');
    expect(row).toMatchObject({ status: 'pending', attempts: 1 });
    const failed = logger.linesOf(/failed attempt 1/);
    expect(failed).toEqual([
      {
        level: 'warn',
        context: 'OutboxDispatcher',
        message: expect.stringMatching(
          /^Message \S+ \(StockTaken to stock\) failed attempt 1, retrying in \d+ ms: RangeError: stock of sku-7 below zero \(batch [0-9a-f]{8}, run [0-9a-f]{8}\)$/,
        ),
        fields: {
          runId: expect.stringMatching(/^[0-9a-f]{8}$/),
          batch: expect.stringMatching(/^[0-9a-f]{8}$/),
          messageId: id,
          key: 'sku-7',
          topic: 'stock',
          type: 'StockTaken',
          attempt: 1,
          errorClass: 'RangeError',
          err: {
            type: 'RangeError',
            message: expect.stringContaining('stock of sku-7 below zero'),
          },
          retryInMs: expect.any(Number),
        },
      },
    ]);
  });
});
