// An ES module Nest app using nestjs-outbox from the packed tarball: import and import() load the
// package's ES entries, require() (through createRequire) its CommonJS build, and both must give
// the very same classes and tokens, or an app that mixes them would break (dual-package hazard).
// Then forRootAsync + enqueue + one dispatch against PostgreSQL, with nestjs-outbox/testing.
import 'reflect-metadata';
import { createRequire } from 'node:module';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  OutboxAdmin,
  OutboxDispatcher,
  OutboxEvent,
  OutboxInvalidMessageError,
  OutboxModule,
  OutboxService,
} from 'nestjs-outbox';
import { dropOutboxTables, ensureOutboxTable } from 'nestjs-outbox/schema';
import { ClientProxyPublisher } from 'nestjs-outbox/microservices';
import { RecordingPublisher } from 'nestjs-outbox/testing';
import { DataSource } from 'typeorm';

function check(condition: boolean, what: string, detail?: unknown): void {
  if (!condition) throw new Error(`pack-smoke (ESM): ${what} ${JSON.stringify(detail) ?? ''}`);
}

const require = createRequire(import.meta.url);
const required = require('nestjs-outbox') as typeof import('nestjs-outbox');
const imported = await import('nestjs-outbox');
const requiredTesting = require('nestjs-outbox/testing') as typeof import('nestjs-outbox/testing');
check(
  required.OutboxModule === OutboxModule &&
    required.OutboxService === OutboxService &&
    required.OutboxAdmin === OutboxAdmin &&
    imported.OutboxModule === OutboxModule &&
    requiredTesting.RecordingPublisher === RecordingPublisher,
  'import and require give different copies of the package',
);
const requiredMicroservices = require('nestjs-outbox/microservices') as {
  ClientProxyPublisher: unknown;
};
check(
  requiredMicroservices.ClientProxyPublisher === ClientProxyPublisher,
  'one microservices copy',
);
// Every subpath whose client library is installed (pack-smoke.sh lists them): each export the
// same through import() as through require().
for (const subpath of (process.env.PACK_SMOKE_SUBPATHS ?? '').split(' ').filter(Boolean)) {
  const viaImport = (await import(subpath)) as Record<string, unknown>;
  const viaRequire = require(subpath) as Record<string, unknown>;
  const names = Object.keys(viaRequire).filter((name) => name !== '__esModule');
  check(
    names.length > 0 && names.every((name) => viaImport[name] === viaRequire[name]),
    `${subpath}: import and require give different exports`,
    names,
  );
}

@OutboxEvent({ topic: 'orders', type: 'order.created', key: 'orderId' })
class OrderCreated {
  constructor(readonly orderId: string) {}
}

const table = `outbox_pack_esm_${process.pid}`;
const publisher = new RecordingPublisher();
const dataSource = await new DataSource({
  type: 'postgres',
  host: process.env.PGHOST ?? '127.0.0.1',
  port: Number(process.env.PGPORT ?? 5432),
  username: process.env.PGUSER ?? 'postgres',
  password: process.env.PGPASSWORD,
  database: process.env.PGDATABASE ?? 'test',
}).initialize();

@Module({ providers: [{ provide: DataSource, useValue: dataSource }], exports: [DataSource] })
class DatabaseModule {}

@Module({
  imports: [
    OutboxModule.forRootAsync({
      imports: [DatabaseModule],
      inject: [DataSource],
      useFactory: (ds: DataSource) => ({
        dataSource: ds,
        tableName: table,
        publisher,
        autoStart: false,
      }),
    }),
  ],
})
class AppModule {}

try {
  // With schema step 9, as getting-started's PostgreSQL migrations make it: the default mode
  // there is delivery partitions (the CommonJS app's table has no step 9, so it leases rows).
  await ensureOutboxTable(dataSource, { tableName: table, with: ['partitions'] });
  const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] });
  try {
    // The provider registered by the ES entry's module, found by the CommonJS build's class.
    const outbox = app.get(required.OutboxService);
    const id = await dataSource.transaction((manager) =>
      outbox.enqueue(new OrderCreated('o-1'), manager),
    );
    const report = await app.get(OutboxDispatcher).runOnce();
    check(report.published === 1, 'dispatch report', report);
    // Delivered by partitions, the default on a table with step 9: this process owns them.
    const [{ owned }] = (await dataSource.query(
      `SELECT count(*)::int AS owned FROM "${table}_owners" WHERE owner IS NOT NULL`,
    )) as [{ owned: number }];
    check(owned === 256, 'every delivery partition owned by the one dispatcher', owned);
    check(
      publisher.messageIds[0] === id &&
        JSON.stringify(publisher.payloads()) === '[{"orderId":"o-1"}]',
      'recorded',
      publisher.messages,
    );
    // Bad input fails the enqueue, and so the transaction, with the package's typed error (the
    // class the ES entry exports): here a header that would be lost on the way.
    const refused = await dataSource
      .transaction((manager) =>
        outbox.enqueue(
          { topic: 'orders', payload: {}, headers: JSON.parse('{"__proto__": "v"}') as object },
          manager,
        ),
      )
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    check(
      refused instanceof OutboxInvalidMessageError &&
        (refused as OutboxInvalidMessageError).reason === 'invalid-header',
      'a __proto__ header refused with OutboxInvalidMessageError',
      String(refused),
    );
    const [{ n }] = (await dataSource.query(`SELECT count(*)::int AS n FROM "${table}"`)) as [
      { n: number },
    ];
    check(n === 1, 'nothing written by the refused enqueue', n);
    // A scheduled and an unscheduled message in one call (on PostgreSQL that failed the
    // transaction before 0.3.0): the one due now is published, the other waits for its time.
    await dataSource.transaction((manager) =>
      outbox.enqueue(
        [
          { topic: 'orders', payload: { later: true }, delayMs: 3_600_000 },
          { topic: 'orders', payload: { now: true } },
        ],
        manager,
      ),
    );
    const mixed = await app.get(OutboxDispatcher).runOnce();
    check(
      mixed.published === 1 && JSON.stringify(publisher.payloads().at(-1)) === '{"now":true}',
      'a mixed call: the unscheduled message published, the scheduled one waiting',
      mixed,
    );
    console.log(
      `pack-smoke (ESM): enqueued ${id} and published it; import and require share one copy`,
    );
  } finally {
    await app.close();
  }
} finally {
  await dropOutboxTables(dataSource, { tableName: table });
  await dataSource.destroy();
}
