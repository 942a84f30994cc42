import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Module, type DynamicModule, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { getDataSourceToken, TypeOrmModule, type TypeOrmModuleOptions } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { OutboxModule, OutboxOptionsError, OutboxService } from '../../lib';
import { outboxMigrations } from '../../lib/schema';
import { InboxModule, InboxService } from '../../lib/inbox';
import { RecordingPublisher } from '../../lib/testing';
import { readOutbox, uniqueTable } from '../support/databases';
import { dropOutboxTable } from '../support/outbox-harness';
import { SERVICES } from '../support/services';
import { waitFor } from '../support/wait-for';

// `dataSource` given as the name a DataSource was registered under with @nestjs/typeorm
// ('default' for the unnamed one), with TypeOrmModule.forRoot and forRootAsync, named or not.

const quiet = { logger: ['error' as const], abortOnError: false };

function postgresOptions(table: string): TypeOrmModuleOptions {
  return {
    type: 'postgres',
    host: SERVICES.postgres.host,
    port: SERVICES.postgres.port,
    username: process.env.PGUSER ?? 'postgres',
    password: process.env.PGPASSWORD,
    database: process.env.PGDATABASE ?? 'test',
    migrations: outboxMigrations({ tableName: table }),
    migrationsTableName: `${table}_migrations`,
    migrationsRun: true,
    retryAttempts: 0,
  };
}

interface Booted {
  readonly app: INestApplicationContext;
  readonly publisher: RecordingPublisher;
}

describe('OutboxModule with a DataSource given by name', () => {
  let table: string;
  let booted: { app: INestApplicationContext; dataSource: DataSource } | undefined;
  const dirs: string[] = [];

  beforeEach(() => {
    table = uniqueTable('outbox_named');
  });

  afterEach(async () => {
    if (booted !== undefined) {
      const { app, dataSource } = booted;
      booted = undefined;
      if (dataSource.isInitialized) {
        await dropOutboxTable(dataSource, table);
        await dataSource.query(`DROP TABLE IF EXISTS ${quote(dataSource, `${table}_migrations`)}`);
      }
      await app.close();
    }
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  async function boot(
    typeorm: DynamicModule,
    outbox: (publisher: RecordingPublisher) => DynamicModule,
    name: string | undefined,
  ): Promise<Booted> {
    const publisher = new RecordingPublisher();
    @Module({ imports: [typeorm, outbox(publisher)] })
    class AppModule {}
    const app = await NestFactory.createApplicationContext(AppModule, quiet);
    booted = { app, dataSource: app.get<DataSource>(getDataSourceToken(name)) };
    return { app, publisher };
  }

  /** Enqueues in a transaction of the DataSource registered as `name`; waits for delivery. */
  async function expectDelivered({ app, publisher }: Booted, name?: string): Promise<void> {
    const dataSource = app.get<DataSource>(getDataSourceToken(name));
    const outbox = app.get(OutboxService);
    const id = await dataSource.transaction((manager) =>
      outbox.enqueue({ topic: 'named', payload: { via: name ?? 'default' } }, manager),
    );
    await waitFor('the message to be published', () => publisher.messageIds.includes(id));
    await waitFor(
      'the row to be settled as delivered',
      async () =>
        (await readOutbox(dataSource, table)).find((r) => r.messageId === id)?.status ===
        'delivered',
    );
  }

  const outboxOptions = (publisher: RecordingPublisher) => ({
    tableName: table,
    publisher,
    dispatcher: { pollIntervalMs: 100, listen: false },
  });

  it("boots with dataSource: 'default' and TypeOrmModule.forRoot()", async () => {
    const app = await boot(
      TypeOrmModule.forRoot(postgresOptions(table)),
      (publisher) => OutboxModule.forRoot({ dataSource: 'default', ...outboxOptions(publisher) }),
      undefined,
    );
    await expectDelivered(app);
  });

  it("boots with dataSource: 'default' and TypeOrmModule.forRootAsync() named 'default'", async () => {
    const app = await boot(
      TypeOrmModule.forRootAsync({
        name: 'default',
        useFactory: () => Promise.resolve(postgresOptions(table)),
      }),
      (publisher) => OutboxModule.forRoot({ dataSource: 'default', ...outboxOptions(publisher) }),
      'default',
    );
    await expectDelivered(app, 'default');
  });

  it('boots with the name of a DataSource from TypeOrmModule.forRootAsync({ name })', async () => {
    const app = await boot(
      TypeOrmModule.forRootAsync({
        name: 'orders',
        useFactory: () => Promise.resolve({ ...postgresOptions(table), name: 'orders' }),
      }),
      (publisher) => OutboxModule.forRoot({ dataSource: 'orders', ...outboxOptions(publisher) }),
      'orders',
    );
    await expectDelivered(app, 'orders');
  });

  it('boots with the name returned by the forRootAsync() factory', async () => {
    const app = await boot(
      TypeOrmModule.forRoot({ ...postgresOptions(table), name: 'orders' }),
      (publisher) =>
        OutboxModule.forRootAsync({
          useFactory: () => Promise.resolve({ dataSource: 'orders', ...outboxOptions(publisher) }),
        }),
      'orders',
    );
    await expectDelivered(app, 'orders');
  });

  it("boots with dataSource: 'default' on SQLite", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'outbox-named-'));
    dirs.push(dir);
    const app = await boot(
      TypeOrmModule.forRootAsync({
        useFactory: () =>
          Promise.resolve({
            type: 'better-sqlite3' as const,
            database: join(dir, 'app.sqlite'),
            enableWAL: true,
            migrations: outboxMigrations({ tableName: table }),
            migrationsRun: true,
            retryAttempts: 0,
          }),
      }),
      (publisher) => OutboxModule.forRoot({ dataSource: 'default', ...outboxOptions(publisher) }),
      undefined,
    );
    await expectDelivered(app);
  });

  it('gives InboxModule.forRootAsync() the DataSource named by its factory', async () => {
    @Module({
      imports: [
        TypeOrmModule.forRoot({ ...postgresOptions(table), name: 'orders' }),
        InboxModule.forRootAsync({ useFactory: () => Promise.resolve({ dataSource: 'orders' }) }),
      ],
    })
    class AppModule {}
    const app = await NestFactory.createApplicationContext(AppModule, quiet);
    const dataSource = app.get<DataSource>(getDataSourceToken('orders'));
    booted = { app, dataSource };
    expect(app.get(InboxService).dataSource).toBe(dataSource);
  });

  it('refuses a name no DataSource is registered under, naming it', async () => {
    for (const outbox of [
      OutboxModule.forRoot({ dataSource: 'ordres', workers: false }),
      OutboxModule.forRootAsync({ workers: false, useFactory: () => ({ dataSource: 'ordres' }) }),
    ]) {
      @Module({ imports: [outbox] })
      class AppModule {}
      const failure = await NestFactory.createApplicationContext(AppModule, {
        logger: false,
        abortOnError: false,
      }).then(
        async (app) => {
          await app.close();
          return undefined;
        },
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(OutboxOptionsError);
      expect((failure as Error).message).toMatch(/"ordres"/);
    }
  });
});

function quote(ds: DataSource, name: string): string {
  return ds.options.type === 'mariadb' || ds.options.type === 'mysql' ? `\`${name}\`` : `"${name}"`;
}
