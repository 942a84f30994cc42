import { Global, Injectable, Module, type DynamicModule } from '@nestjs/common';
import { CqrsModule, EventBus, EventsHandler, type IEventHandler } from '@nestjs/cqrs';
import { EventEmitter2, EventEmitterModule, OnEvent } from '@nestjs/event-emitter';
import { Test, type TestingModule } from '@nestjs/testing';
import {
  ClsPluginTransactional,
  Propagation,
  Transactional,
  TransactionHost,
} from '@nestjs-cls/transactional';
import { ClsModule } from 'nestjs-cls';
import {
  LocalPublisher,
  OnOutboxMessage,
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandlersModule,
  OutboxModule,
  OutboxService,
  type OutboxHandlerMessage,
  type OutboxPublisher,
} from '../../lib';
import { fromClsTransactionHost, guardOutboxWrites } from '../../lib/integrations/cls';
import { OutboxCqrsModule } from '../../lib/integrations/cqrs';
import { OutboxEventEmitterModule } from '../../lib/integrations/event-emitter';
import type { OutboxBridgeOptions } from '../../lib/integrations/bridge/outbox-bridge.options';
import {
  createOutboxTable,
  outboxDialectOf,
  outboxTableDropDdl,
} from '../../lib/store/schema/outbox-table-ddl';
import { uniqueTable } from '../support/databases';
import { CLIENT, type ClsLibrary } from './cls-targets';
import { messageIdText } from '../../lib/store/rows/message-id-codec';

// An app of the ambient path and the event-bus bridges: the library's client under CLIENT,
// ClsModule with the library's transactional adapter (wrapped by guardOutboxWrites unless told
// otherwise), OutboxModule on the library's connection with fromClsTransactionHost(txHost), the
// in-process transport as the consumer (the dispatcher delivers after commit), and, as asked,
// CqrsModule + OutboxCqrsModule and EventEmitterModule + OutboxEventEmitterModule.

@OutboxEvent({ topic: 'orders', type: 'order.placed', key: (e: OrderPlaced) => e.customer })
export class OrderPlaced {
  constructor(
    readonly orderId: string,
    readonly customer: string,
  ) {}
}

/** An event of the bus that is not an outbox event. */
export class OrderViewed {
  constructor(readonly orderId: string) {}
}

/** What reached the consumers: through the outbox (after commit), or in memory (at once). */
@Injectable()
export class Received {
  readonly outbox: OutboxHandlerMessage<{ orderId: string; customer: string }>[] = [];
  readonly inMemory: object[] = [];
}

@Injectable()
export class OutboxConsumer {
  constructor(private readonly received: Received) {}

  @OnOutboxMessage('orders')
  handle(message: OutboxHandlerMessage<{ orderId: string; customer: string }>): void {
    this.received.outbox.push(message);
  }
}

@EventsHandler(OrderPlaced, OrderViewed)
export class BusHandler implements IEventHandler<OrderPlaced | OrderViewed> {
  constructor(private readonly received: Received) {}
  handle(event: OrderPlaced | OrderViewed): void {
    this.received.inMemory.push(event);
  }
}

@Injectable()
export class EmitterListener {
  constructor(private readonly received: Received) {}
  @OnEvent('order.*')
  handle(event: object): void {
    this.received.inMemory.push(event);
  }
}

@Injectable()
export class LibraryRef {
  constructor(readonly value: ClsLibrary) {}
}

/** The business service: @Transactional() methods that write a row and run `work`. */
@Injectable()
export class Orders {
  constructor(
    private readonly txHost: TransactionHost,
    private readonly library: LibraryRef,
  ) {}

  /** Writes order `id`, runs `work` inside the transaction; rolls back when `work` throws. */
  @Transactional()
  async place<T>(id: string, work: () => Promise<T>): Promise<T> {
    await this.library.value.insertOrder(this.txHost.tx, id);
    return work();
  }

  /** Runs `work` in a nested transaction (a savepoint, where the adapter has them). */
  nested<T>(work: () => Promise<T>): Promise<T> {
    return this.txHost.withTransaction(Propagation.Nested, work);
  }
}

export interface ClsAppSpec {
  readonly cqrs?: OutboxBridgeOptions;
  readonly emitter?: OutboxBridgeOptions;
  /** Leave the adapter unwrapped (no guardOutboxWrites). */
  readonly unguarded?: boolean;
  /** The outbox's publisher, made from the app's LocalPublisher. @default the LocalPublisher */
  readonly publisher?: (local: LocalPublisher) => OutboxPublisher;
}

export interface ClsApp {
  readonly moduleRef: TestingModule;
  readonly table: string;
  readonly outbox: OutboxService<unknown>;
  readonly orders: Orders;
  readonly received: Received;
  readonly eventBus: EventBus;
  readonly emitter: EventEmitter2;
  readonly dispatcher: OutboxDispatcher;
  /** Message ids in the outbox table, in id order, with their keys. */
  rows(): Promise<{ messageId: string; key: string | null }[]>;
  orderExists(id: string): Promise<boolean>;
  /** Runs the dispatcher until a batch claims nothing. */
  drain(): Promise<void>;
  close(): Promise<void>;
}

export async function openClsApp(library: ClsLibrary, spec: ClsAppSpec = {}): Promise<ClsApp> {
  const table = uniqueTable('outbox_cls');
  const sql = library.connection.sql;
  await createOutboxTable(sql, { tableName: table });

  @Global()
  @Module({
    providers: [
      { provide: CLIENT, useValue: library.client },
      { provide: LibraryRef, useValue: new LibraryRef(library) },
    ],
    exports: [CLIENT, LibraryRef],
  })
  class ClientModule {}

  const adapter = spec.unguarded ? library.adapter() : guardOutboxWrites(library.adapter());
  const bridges: DynamicModule[] = [];
  if (spec.cqrs !== undefined)
    bridges.push(CqrsModule.forRoot(), OutboxCqrsModule.forRoot(spec.cqrs));
  if (spec.emitter !== undefined) {
    bridges.push(
      EventEmitterModule.forRoot({ wildcard: true }),
      OutboxEventEmitterModule.forRoot(spec.emitter),
    );
  }
  const moduleRef = await Test.createTestingModule({
    imports: [
      ClientModule,
      ClsModule.forRoot({
        global: true,
        plugins: [
          new ClsPluginTransactional({
            imports: [ClientModule],
            adapter: adapter as ConstructorParameters<typeof ClsPluginTransactional>[0]['adapter'],
          }),
        ],
      }),
      OutboxHandlersModule.forRoot(),
      OutboxModule.forRootAsync({
        inject: [TransactionHost, LocalPublisher],
        useFactory: (txHost: TransactionHost, local: LocalPublisher) => ({
          ...(library.dataSource === undefined
            ? { connection: library.connection }
            : { dataSource: library.dataSource }),
          publisher: spec.publisher === undefined ? local : spec.publisher(local),
          tableName: table,
          autoStart: false,
          ambientTransaction: fromClsTransactionHost(txHost),
          retry: { maxAttempts: 3, initialDelayMs: 20, factor: 1, jitter: 0 },
        }),
      }),
      ...bridges,
    ],
    providers: [
      Received,
      Orders,
      OutboxConsumer,
      ...(spec.cqrs === undefined ? [] : [BusHandler]),
      ...(spec.emitter === undefined ? [] : [EmitterListener]),
    ],
  }).compile();
  moduleRef.useLogger(['error', 'fatal']);
  await moduleRef.init();
  const dispatcher = moduleRef.get(OutboxDispatcher);
  let closed = false;
  const p = library.placeholder;
  return {
    moduleRef,
    table,
    outbox: moduleRef.get<OutboxService<unknown>>(OutboxService),
    orders: moduleRef.get(Orders),
    received: moduleRef.get(Received),
    eventBus: spec.cqrs === undefined ? (undefined as never) : moduleRef.get(EventBus),
    emitter: spec.emitter === undefined ? (undefined as never) : moduleRef.get(EventEmitter2),
    dispatcher,
    async rows() {
      const { rows } = await sql.query<{ message_id: unknown; message_key: string | null }>(
        `SELECT message_id, message_key FROM ${table} ORDER BY id`,
      );
      return rows.map((r) => ({ messageId: messageIdText(r.message_id), key: r.message_key }));
    },
    async orderExists(id) {
      const { rows } = await sql.query(`SELECT id FROM ${library.ordersTable} WHERE id = ${p(1)}`, [
        id,
      ]);
      return rows.length === 1;
    },
    async drain() {
      for (let i = 0; i < 100; i++) {
        if ((await dispatcher.runOnce()).claimed === 0) return;
      }
      throw new Error('the dispatcher never ran out of work');
    },
    async close() {
      if (closed) return;
      closed = true;
      await moduleRef.close();
      for (const statement of outboxTableDropDdl(outboxDialectOf(sql.databaseType), {
        tableName: table,
      })) {
        await sql.query(statement);
      }
    },
  };
}
