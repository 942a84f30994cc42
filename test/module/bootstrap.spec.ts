import { inspect } from 'node:util';
import { Module, type INestApplicationContext, type LoggerService } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { NestFactory } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import {
  OutboxDispatcher,
  OutboxError,
  OutboxModule,
  OutboxOptionsError,
  OutboxService,
  OutboxTableMissingError,
  type OutboxModuleOptions,
} from '../../lib';
import { logTailing } from '../../lib/log-tailing';
import { RecordingPublisher } from '../../lib/testing';
import { testDatabase, uniqueTable } from '../support/databases';

/**
 * Keeps what Nest logs at error level (the message as its ConsoleLogger prints it, and the rest)
 * and the warnings.
 */
class CapturingLogger implements LoggerService {
  readonly errors: { printed: string; rest: unknown[] }[] = [];
  readonly warnings: string[] = [];
  log(): void {}
  warn(message: unknown): void {
    this.warnings.push(String(message));
  }
  error(message: unknown, ...rest: unknown[]): void {
    // ConsoleLogger prints a non-string message with util.inspect.
    this.errors.push({ printed: typeof message === 'string' ? message : inspect(message), rest });
  }
}

const sqlite = testDatabase('sqlite');

describe('bootstrap checks', () => {
  it('fails at bootstrap when the outbox table does not exist, naming the fix', async () => {
    const table = uniqueTable();
    const ds = await sqlite.open(table);
    try {
      const compile = Test.createTestingModule({
        imports: [
          OutboxModule.forRoot({ dataSource: ds, tableName: 'no_such_outbox', workers: false }),
        ],
      }).compile();
      await expect(compile).rejects.toBeInstanceOf(OutboxTableMissingError);
      await expect(compile).rejects.toBeInstanceOf(OutboxError);
      // The database's own answer, then the fix.
      await expect(compile).rejects.toThrow(
        /"no_such_outbox" cannot be read \(.*no such table: no_such_outbox\): create it .*outboxMigrations\(\).*"npx outbox schema migrate --table no_such_outbox".*createOutboxTable\(<connection>\.sql, \{ tableName: 'no_such_outbox' \}\).*outboxTableDdl\(<dialect>, \{ tableName: 'no_such_outbox' \}\)/,
      );
    } finally {
      await sqlite.close(ds, table);
    }
  });

  it('logs the missing table as one line, keeping the driver error on cause', async () => {
    const table = uniqueTable();
    const ds = await sqlite.open(table);
    const logger = new CapturingLogger();
    @Module({
      imports: [
        OutboxModule.forRoot({ dataSource: ds, tableName: 'no_such_outbox', workers: false }),
      ],
    })
    class AppModule {}
    try {
      const failure = await NestFactory.createApplicationContext(AppModule, {
        logger,
        abortOnError: false,
      }).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(OutboxTableMissingError);
      const error = failure as OutboxTableMissingError;
      expect(error.table).toBe('"no_such_outbox"');
      expect((error.cause as Error).message).toMatch(/no such table/);
      // Nest logs the error it got; printed, it is its one-line message, not a cause dump.
      const logged = logger.errors.filter((e) => e.printed.includes('no_such_outbox'));
      expect(logged.map((e) => e.printed)).toEqual([`OutboxTableMissingError: ${error.message}`]);
      // …and no stack is passed beside it either (only Nest's context name).
      expect(
        logged[0]?.rest.filter((arg) => typeof arg === 'string' && arg.includes('\n')),
      ).toEqual([]);
    } finally {
      await sqlite.close(ds, table);
    }
  });

  it('refuses the dispatcher on an in-memory SQLite database', async () => {
    const { DataSource } = await import('typeorm');
    const ds = new DataSource({ type: 'better-sqlite3', database: ':memory:' });
    await ds.initialize();
    const { ensureOutboxTable } = await import('../../lib/schema');
    await ensureOutboxTable(ds);
    const publisher = { publish: () => Promise.resolve([]) };
    try {
      await expect(
        Test.createTestingModule({
          imports: [OutboxModule.forRoot({ dataSource: ds, publisher, autoStart: false })],
        }).compile(),
      ).rejects.toBeInstanceOf(OutboxOptionsError);
    } finally {
      await ds.destroy();
    }
  });

  describe('the delivery mode', () => {
    async function boot(
      table: string,
      options: Partial<OutboxModuleOptions>,
      logger: CapturingLogger,
    ): Promise<{ app: INestApplicationContext; ds: DataSource; close: () => Promise<void> }> {
      const ds = await sqlite.open(table);
      @Module({ imports: [OutboxModule.forRoot({ dataSource: ds, tableName: table, ...options })] })
      class AppModule {}
      try {
        const app = await NestFactory.createApplicationContext(AppModule, {
          logger,
          abortOnError: false,
        });
        return {
          app,
          ds,
          close: async () => {
            await app.close();
            await sqlite.close(ds, table);
          },
        };
      } catch (error) {
        await sqlite.close(ds, table);
        throw error;
      }
    }

    it("reads the 0.2 pair and delivers as 'poll', warning once at bootstrap with what to write", async () => {
      const table = uniqueTable();
      const publisher = new RecordingPublisher();
      const logger = new CapturingLogger();
      const { app, ds, close } = await boot(
        table,
        { publisher, autoStart: false, delivery: 'dispatcher', dispatcher: { observe: 'poll' } },
        logger,
      );
      try {
        const outbox = app.get(OutboxService);
        const id = await ds.transaction((m) =>
          outbox.enqueue({ topic: 't', key: 'k', type: 'x', payload: { n: 1 } }, m),
        );
        expect(await app.get(OutboxDispatcher).drain()).toBe(1);
        expect(publisher.messageIds).toEqual([id]);
        const deprecations = logger.warnings.filter((w) => w.includes('deprecated'));
        expect(deprecations).toEqual([
          `OutboxModule "default": delivery: 'dispatcher' with dispatcher.observe: 'poll' is deprecated and will be removed in 0.4. Write delivery: 'poll' (or leave it out) and remove dispatcher.observe instead: the delivery mode is one option now (docs/upgrading.md#one-option-for-the-delivery-mode).`,
        ]);
      } finally {
        await close();
      }
    });

    it("says nothing of deprecation with delivery: 'poll'", async () => {
      const logger = new CapturingLogger();
      const publisher = new RecordingPublisher();
      const { close } = await boot(
        uniqueTable(),
        { publisher, autoStart: false, delivery: 'poll' },
        logger,
      );
      await close();
      expect(logger.warnings.filter((w) => w.includes('deprecated'))).toEqual([]);
    });

    it('fails the start on the two spellings mixed, saying to keep delivery alone', async () => {
      const logger = new CapturingLogger();
      const failure = await boot(
        uniqueTable(),
        {
          publisher: new RecordingPublisher(),
          autoStart: false,
          delivery: logTailing(),
          dispatcher: { observe: 'poll' },
        },
        logger,
      ).then(
        async ({ close }) => {
          await close();
          return undefined;
        },
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(OutboxOptionsError);
      expect(failure).toMatchObject({
        option: 'dispatcher.observe',
        message: expect.stringContaining('Remove dispatcher.observe and say it in delivery alone'),
      });
    });
  });
});
