import { Injectable, type LoggerService } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { OnOutboxMessage, type OutboxHandlerMessage } from '../../lib';
import { testDatabase } from '../support/databases';
import { openLocalApp, type LocalApp } from './local-app';

// A failing in-process handler says why in the log at its first failed attempt, with the
// message's facts as fields, before the message is ever dead-lettered.

interface Line {
  readonly level: string;
  readonly message: string;
  readonly fields: Record<string, unknown> | undefined;
}

class CapturingLogger implements LoggerService {
  readonly lines: Line[] = [];
  private push(level: string, message: unknown, params: unknown[]): void {
    const fields = params.find(
      (p): p is Record<string, unknown> => typeof p === 'object' && p !== null,
    );
    if (params.at(-1) === 'OutboxDispatcher')
      this.lines.push({ level, message: String(message), fields });
  }
  log(message: unknown, ...params: unknown[]): void {
    this.push('log', message, params);
  }
  warn(message: unknown, ...params: unknown[]): void {
    this.push('warn', message, params);
  }
  error(message: unknown, ...params: unknown[]): void {
    this.push('error', message, params);
  }
  debug(message: unknown, ...params: unknown[]): void {
    this.push('debug', message, params);
  }
  verbose(message: unknown, ...params: unknown[]): void {
    this.push('verbose', message, params);
  }
}

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
    const failed = logger.lines.filter((l) => /failed attempt 1/.test(l.message));
    expect(failed).toEqual([
      {
        level: 'warn',
        message: expect.stringMatching(
          /^Message \S+ \(StockTaken to stock\) failed attempt 1, retrying in \d+ ms: RangeError: stock of sku-7 below zero \(run [0-9a-f]{8}\)$/,
        ),
        fields: {
          runId: expect.stringMatching(/^[0-9a-f]{8}$/),
          messageId: id,
          key: 'sku-7',
          topic: 'stock',
          type: 'StockTaken',
          attempt: 1,
          errorClass: 'RangeError',
          retryInMs: expect.any(Number),
        },
      },
    ]);
  });
});
