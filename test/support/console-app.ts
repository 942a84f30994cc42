import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import type { DataSource } from 'typeorm';
import {
  OutboxAdmin,
  OutboxDispatcher,
  OutboxModule,
  OutboxService,
  type OutboxMessage,
  type OutboxPublisher,
} from '../../lib';
import { OutboxConsoleModule, type OutboxConsoleOptions } from '../../lib/operations/console';
import { testDatabase, uniqueTable } from './databases';

export const CONSOLE_TOKEN = 'console-test-token';

/** A Nest app on Express and PostgreSQL, with an outbox table of its own and the console mounted. */
export interface ConsoleApp {
  readonly app: INestApplication;
  /** The console's URL, e.g. http://127.0.0.1:40123/outbox. */
  readonly url: string;
  readonly table: string;
  readonly dataSource: DataSource;
  readonly admin: OutboxAdmin;
  readonly dispatcher: OutboxDispatcher;
  enqueue(messages: readonly OutboxMessage[]): Promise<string[]>;
  close(): Promise<void>;
}

/** The console accepts `Authorization: Bearer CONSOLE_TOKEN` unless `console` says otherwise. */
export async function openConsoleApp(
  publisher: OutboxPublisher,
  console: OutboxConsoleOptions & { path?: string; auditTableName?: string } = {},
): Promise<ConsoleApp> {
  const db = testDatabase('postgres');
  const table = uniqueTable('outbox_console');
  const dataSource = await db.open(table);
  const { auditTableName, ...consoleOptions } = console;
  try {
    const moduleRef = await Test.createTestingModule({
      imports: [
        OutboxModule.forRoot({
          dataSource,
          tableName: table,
          publisher,
          autoStart: false,
          retry: { maxAttempts: 1 },
          dispatcher: { listen: false },
        }),
        OutboxConsoleModule.forRoot({
          authorize: (request) => request.headers.authorization === `Bearer ${CONSOLE_TOKEN}`,
          sampleIntervalMs: 1_000,
          ...(auditTableName === undefined
            ? {}
            : { auditTable: { dataSource, tableName: auditTableName } }),
          ...consoleOptions,
        }),
      ],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: ['error'] });
    await app.listen(0, '127.0.0.1');
    const outbox = app.get(OutboxService);
    const base = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    return {
      app,
      url: `${base}${console.path ?? '/outbox'}`,
      table,
      dataSource,
      admin: app.get(OutboxAdmin),
      dispatcher: app.get(OutboxDispatcher),
      enqueue: (messages) => dataSource.transaction((m) => outbox.enqueue(messages, m)),
      close: async () => {
        await app.close();
        await db.close(dataSource, table);
      },
    };
  } catch (error) {
    await db.close(dataSource, table);
    throw error;
  }
}
