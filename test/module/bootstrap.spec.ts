import { inspect } from 'node:util';
import { Module, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import { OutboxError, OutboxModule, OutboxOptionsError, OutboxTableMissingError } from '../../lib';
import { testDatabase, uniqueTable } from '../support/databases';

/** Keeps what Nest logs at error level: the message as its ConsoleLogger prints it, and the rest. */
class CapturingLogger implements LoggerService {
  readonly errors: { printed: string; rest: unknown[] }[] = [];
  log(): void {}
  warn(): void {}
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
});
