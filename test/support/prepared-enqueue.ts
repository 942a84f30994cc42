import { Test, type TestingModule } from '@nestjs/testing';
import { OutboxEvent, OutboxModule, type OutboxModuleOptions } from '../../lib';

// What the prepared-enqueue specs (test/store/*-prepared-enqueue.spec.ts) share: the event they
// enqueue, and enqueue-only modules on one table, closed after each case.

@OutboxEvent({ topic: 'orders', type: 'order.placed', key: (e: OrderPlaced) => e.orderId })
export class OrderPlaced {
  constructor(readonly orderId: string) {}
}

/** Builds enqueue-only modules on `table`; `closeAll` closes those built since its last call. */
export function enqueueModules(table: string): {
  moduleWith(
    connection: Pick<OutboxModuleOptions, 'dataSource' | 'connection'>,
    options?: Partial<OutboxModuleOptions>,
  ): Promise<TestingModule>;
  /** Closes `close` along with the modules (a pool or DataSource of one case). */
  onClose(close: () => Promise<unknown>): void;
  closeAll(): Promise<void>;
} {
  const closers: (() => Promise<unknown>)[] = [];
  return {
    async moduleWith(connection, options = {}) {
      const moduleRef = await Test.createTestingModule({
        imports: [
          OutboxModule.forRoot({ ...connection, tableName: table, workers: false, ...options }),
        ],
      }).compile();
      await moduleRef.init();
      closers.push(() => moduleRef.close());
      return moduleRef;
    },
    onClose(close) {
      closers.push(close);
    },
    async closeAll() {
      for (const close of closers.splice(0).reverse()) await close().catch(() => undefined);
    },
  };
}
