// A Nest app outside the repository, using nestjs-outbox from the packed tarball the way a user
// would: forRootAsync with an injected DataSource, enqueue with an EntityManager, one dispatch.
import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { DataSource } from 'typeorm';
import {
  OutboxDispatcher,
  OutboxEvent,
  OutboxModule,
  OutboxService,
  createOutboxMigration,
  type OutboxPublisher,
} from 'nestjs-outbox';
import { ClientProxyPublisher } from 'nestjs-outbox/microservices';

@OutboxEvent({ topic: 'orders', type: 'order.created', key: 'orderId' })
class OrderCreated {
  constructor(readonly orderId: string) {}
}

const table = `outbox_pack_${process.pid}`;
const received: string[] = [];
const publisher: OutboxPublisher = {
  publish: (messages) => {
    received.push(...messages.map((m) => m.payload));
    return Promise.resolve(messages.map(() => ({ ok: true as const })));
  },
};

@Module({
  providers: [
    {
      provide: DataSource,
      useFactory: async () =>
        new DataSource({
          type: 'postgres',
          host: process.env.PGHOST ?? '127.0.0.1',
          port: Number(process.env.PGPORT ?? 5432),
          username: process.env.PGUSER ?? 'postgres',
          database: process.env.PGDATABASE ?? 'test',
          migrations: [createOutboxMigration({ tableName: table })],
          migrationsRun: true,
        }).initialize(),
    },
  ],
  exports: [DataSource],
})
class DatabaseModule {}

@Module({
  imports: [
    DatabaseModule,
    OutboxModule.forRootAsync({
      imports: [DatabaseModule],
      inject: [DataSource],
      useFactory: (dataSource: DataSource) => ({
        dataSource,
        tableName: table,
        publisher,
        autoStart: false,
      }),
    }),
  ],
})
class AppModule {}

async function main(): Promise<void> {
  if (typeof ClientProxyPublisher !== 'function') throw new Error('subpath export missing');
  const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] });
  const dataSource = app.get(DataSource);
  try {
    const outbox = app.get(OutboxService);
    const id = await dataSource.transaction((manager) =>
      outbox.enqueue(new OrderCreated('o-1'), manager),
    );
    const report = await app.get(OutboxDispatcher).runOnce();
    if (report.published !== 1 || received[0] !== '{"orderId":"o-1"}') {
      throw new Error(`unexpected outcome: ${JSON.stringify({ report, received })}`);
    }
    console.log(`pack-smoke: enqueued ${id} and published it from the installed tarball`);
  } finally {
    await dataSource.query(`DROP TABLE IF EXISTS "${table}"`);
    await dataSource
      .query(`DELETE FROM migrations WHERE name LIKE 'CreateOutboxTable%'`)
      .catch(() => undefined);
    await app.close();
    await dataSource.destroy();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
