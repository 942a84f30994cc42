import type { INestApplication, Provider } from '@nestjs/common';
import fastifyFormbody from '@fastify/formbody';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import type { DataSource } from 'typeorm';
import {
  OutboxAdmin,
  OutboxDispatcher,
  OutboxModule,
  OutboxService,
  type OutboxMessage,
  type OutboxModuleOptions,
  type OutboxPublisher,
} from '../../lib';
import { OutboxConsoleModule, type OutboxConsoleOptions } from '../../lib/operations/console';
import { testDatabase, uniqueTable } from './databases';

export const CONSOLE_TOKEN = 'console-test-token';

/**
 * A Nest app on Express (or Fastify) and PostgreSQL, with an outbox table of its own and the
 * console mounted.
 */
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

/** How the app's HTTP server is made: Nest's default (Express) or a Fastify adapter. */
export interface ConsoleHttp {
  readonly adapter?: 'express' | 'fastify';
  /** Fastify only: build the app with `bodyParser: false` (no form parser of Nest's). */
  readonly bodyParser?: boolean;
  /** Fastify only: register @fastify/formbody (awaited) before the app starts. */
  readonly formbody?: boolean;
  /**
   * Trust the proxy on the loopback (this test's own requests), as an app behind a reverse proxy
   * does: Express `app.set('trust proxy', 'loopback')`, Fastify `trustProxy: '127.0.0.1'`.
   * @default false (the adapters' default)
   */
  readonly trustProxy?: boolean;
}

/** The console accepts `Authorization: Bearer CONSOLE_TOKEN` unless `console` says otherwise. */
export async function openConsoleApp(
  publisher: OutboxPublisher,
  console: OutboxConsoleOptions & {
    path?: string;
    auditTableName?: string;
    /** The outbox's `ordering` options. @default ordering on, dead letters block their key */
    ordering?: OutboxModuleOptions['ordering'];
    /** The outbox's `delivery`; with 'external', `publisher` is not given to the module. */
    delivery?: OutboxModuleOptions['delivery'];
    /** The outbox's per-event-type `policies`. @default none */
    policies?: OutboxModuleOptions['policies'];
    /** The outbox's `tenants` option. @default none */
    tenants?: OutboxModuleOptions['tenants'];
    /** The outbox's `erasure` option. @default none */
    erasure?: OutboxModuleOptions['erasure'];
    /** The app's own providers (e.g. `@OnOutboxDeadLetter` fallbacks). @default none */
    providers?: Provider[];
    /**
     * The outbox's `dispatcher` options over the harness's (`listen: false`), its `instanceId`,
     * and whether its dispatcher starts on its own. @default the harness's; autoStart false
     */
    dispatcher?: OutboxModuleOptions['dispatcher'];
    instanceId?: string;
    autoStart?: boolean;
  } = {},
  http: ConsoleHttp = {},
): Promise<ConsoleApp> {
  const db = testDatabase('postgres');
  const table = uniqueTable('outbox_console');
  const dataSource = await db.open(table);
  const {
    auditTableName,
    ordering,
    delivery,
    policies,
    tenants,
    erasure,
    providers,
    dispatcher,
    instanceId,
    autoStart,
    ...consoleOptions
  } = console;
  try {
    const moduleRef = await Test.createTestingModule({
      imports: [
        OutboxModule.forRoot({
          dataSource,
          tableName: table,
          ...(delivery === 'external' ? { delivery } : { publisher }),
          autoStart: autoStart ?? false,
          retry: { maxAttempts: 1 },
          dispatcher: { listen: false, ...dispatcher },
          ...(instanceId === undefined ? {} : { instanceId }),
          ...(ordering === undefined ? {} : { ordering }),
          ...(policies === undefined ? {} : { policies }),
          ...(tenants === undefined ? {} : { tenants }),
          ...(erasure === undefined ? {} : { erasure }),
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
      providers: providers ?? [],
    }).compile();
    let app: INestApplication;
    if (http.adapter === 'fastify') {
      const fastify = moduleRef.createNestApplication<NestFastifyApplication>(
        new FastifyAdapter(http.trustProxy === true ? { trustProxy: '127.0.0.1' } : {}),
        { logger: ['error'], bodyParser: http.bodyParser ?? true },
      );
      if (http.formbody === true) await fastify.register(fastifyFormbody);
      app = fastify;
    } else {
      const express = moduleRef.createNestApplication<NestExpressApplication>({
        logger: ['error'],
      });
      if (http.trustProxy === true) express.set('trust proxy', 'loopback');
      app = express;
    }
    try {
      await app.listen(0, '127.0.0.1');
    } catch (error) {
      await app.close();
      throw error;
    }
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
