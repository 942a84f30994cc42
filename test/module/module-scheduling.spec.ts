import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Interval, ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import type { DataSource } from 'typeorm';
import { OutboxModule, OutboxService } from '../../lib';
import { RecordingPublisher } from '../../lib/testing';
import { readOutbox, testDatabase, uniqueTable } from '../support/databases';
import { sleep, waitFor } from '../support/wait-for';

// The outbox runs its workers on timers of its own: it must never add a second
// ScheduleModule.forRoot() to an app that has one (every @Interval/@Cron of the app would then
// fire twice), nor give one to an app that has none.

const postgres = testDatabase('postgres');

const TICK_MS = 200;

@Injectable()
class TickCounter {
  ticks = 0;

  @Interval(TICK_MS)
  tick(): void {
    this.ticks += 1;
  }
}

const quiet = { logger: ['error' as const] };

describe('the outbox and the app scheduler', () => {
  let ds: DataSource;
  let table: string;
  let app: INestApplicationContext | undefined;

  beforeEach(async () => {
    table = uniqueTable('outbox_sched');
    ds = await postgres.open(table);
  });

  afterEach(async () => {
    await app?.close();
    app = undefined;
    await postgres.close(ds, table);
  });

  const outbox = (publisher: RecordingPublisher) =>
    OutboxModule.forRoot({
      dataSource: ds,
      tableName: table,
      publisher,
      dispatcher: { pollIntervalMs: 100, listen: false },
    });

  const enqueueOne = (service: OutboxService): Promise<string> =>
    ds.transaction((manager) =>
      service.enqueue({ topic: 'scheduling', payload: { n: 1 } }, manager),
    );

  it("fires the app's own @Interval job once per period beside the outbox", async () => {
    const publisher = new RecordingPublisher();
    @Module({ imports: [ScheduleModule.forRoot(), outbox(publisher)], providers: [TickCounter] })
    class AppModule {}

    app = await NestFactory.createApplicationContext(AppModule, quiet);
    const counter = app.get(TickCounter);
    counter.ticks = 0;
    const started = Date.now();
    await sleep(1_000);
    const ticks = counter.ticks;
    const elapsed = Date.now() - started;

    // One schedule gives at most elapsed / 200 ticks, plus one for the phase of the window (6
    // here; timers never fire early, a busy machine only delays them); a doubled one about twice.
    expect(ticks).toBeGreaterThanOrEqual(1);
    expect(ticks).toBeLessThanOrEqual(Math.floor(elapsed / TICK_MS) + 1);

    // The outbox still delivers on its own schedule, and its timer is listed in the app's registry
    // (no unlocker: on this PostgreSQL table with schema step 9 the dispatcher delivers by
    // partitions, which lease no row).
    const id = await enqueueOne(app.get(OutboxService));
    await waitFor('the message to be published', () => publisher.messageIds.includes(id));
    const names = app.get(SchedulerRegistry).getIntervals();
    expect(names.filter((name) => name.startsWith('nestjs-outbox:')).sort()).toEqual([
      'nestjs-outbox:cleaner',
      'nestjs-outbox:dispatcher',
    ]);
  });

  it('gives an app without ScheduleModule no scheduler, and still delivers on its timers', async () => {
    const publisher = new RecordingPublisher();
    @Module({ imports: [outbox(publisher)] })
    class AppModule {}

    app = await NestFactory.createApplicationContext(AppModule, quiet);
    const context = app;
    expect(() => context.get(SchedulerRegistry, { strict: false })).toThrow();

    const id = await enqueueOne(app.get(OutboxService));
    await waitFor('the message to be published', () => publisher.messageIds.includes(id));
    await waitFor(
      'the row to be settled as delivered',
      async () =>
        (await readOutbox(ds, table)).find((r) => r.messageId === id)?.status === 'delivered',
    );
  });
});
