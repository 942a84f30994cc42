import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Injectable, Module, type INestApplication } from '@nestjs/common';
import { ClientProxyFactory, Transport } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { OutboxEvent, OutboxModule, OutboxService, type OutboxPublisher } from '../../lib';
import { outboxMigrations } from '../../lib/schema';
import { ClientProxyPublisher } from '../../lib/publishers/microservices';
import { RecordingPublisher } from '../../lib/testing';
import { freePort } from '../support/transports/net';

// The recipe of docs/testing.md ("An e2e test of the whole app, the broker swapped"), followed
// as written on SQLite: the app's publisher is a provider of its own, and the test swaps it
// with overrideProvider. The app's own publisher points at a port nothing listens on, so a
// message can only arrive through the override.

const EVENTS_PUBLISHER = Symbol('EVENTS_PUBLISHER');
let eventsPort = 0;
let built = 0;

@Module({
  providers: [
    {
      provide: EVENTS_PUBLISHER,
      useFactory: (): OutboxPublisher => {
        built++;
        return new ClientProxyPublisher(
          ClientProxyFactory.create({ transport: Transport.TCP, options: { port: eventsPort } }),
          { mode: 'send', closeClient: true },
        );
      },
    },
  ],
  exports: [EVENTS_PUBLISHER],
})
class EventsPublisherModule {}

@OutboxEvent({ topic: 'orders', type: 'order.created', key: 'orderId' })
class OrderCreated {
  constructor(
    readonly orderId: string,
    readonly total: number,
  ) {}
}

@Injectable()
class OrdersService {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly outbox: OutboxService,
  ) {}

  create(orderId: string, total: number): Promise<string> {
    return this.dataSource.transaction((manager) =>
      this.outbox.enqueue(new OrderCreated(orderId, total), manager),
    );
  }
}

describe('the e2e recipe: the app module as in production, its publisher swapped with overrideProvider', () => {
  let dir: string;
  let app: INestApplication | undefined;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'outbox-e2e-'));
    eventsPort = await freePort();
  });

  afterAll(async () => {
    await app?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('publishes through the test publisher, with the dispatcher running on its own', async () => {
    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'better-sqlite3',
          database: join(dir, 'shop.sqlite'),
          migrations: [...outboxMigrations()],
          migrationsRun: true,
        }),
        OutboxModule.forRootAsync({
          imports: [EventsPublisherModule],
          inject: [DataSource, EVENTS_PUBLISHER],
          useFactory: (dataSource: DataSource, publisher: OutboxPublisher) => ({
            dataSource,
            publisher,
            dispatcher: { pollIntervalMs: 50 },
          }),
        }),
      ],
      providers: [OrdersService],
    })
    class AppModule {}

    const publisher = new RecordingPublisher();
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] })
      .overrideProvider(EVENTS_PUBLISHER)
      .useValue(publisher)
      .compile();
    app = moduleRef.createNestApplication();
    await app.init();

    const id = await app.get(OrdersService).create('c-1', 42);
    await publisher.until((p) => p.messages.length === 1);
    expect(publisher.messageIds).toEqual([id]);
    expect(publisher.payloads({ type: 'order.created' })).toEqual([{ orderId: 'c-1', total: 42 }]);
    expect(built).toBe(0); // the production publisher was never made
  });
});
