import { Test, type TestingModule } from '@nestjs/testing';
import type { DataSource } from 'typeorm';
import {
  OutboxAdmin,
  OutboxDispatcher,
  OutboxModule,
  OutboxService,
  type OutboxBatchReport,
  type OutboxModuleOptions,
} from '../../lib';
import type { OutboxStore } from '../../lib/store/outbox-store.port';
import { OUTBOX_STORE } from '../../lib/outbox.constants';
import { RecordingPublisher } from './recording.publisher';

// One outbox module on an existing table, driven by hand: several of them on one table act as
// several dispatcher instances of one app.

export type InstanceOverrides = Omit<
  Partial<OutboxModuleOptions>,
  'dataSource' | 'publisher' | 'tableName'
>;

export interface Instance {
  readonly moduleRef: TestingModule;
  readonly outbox: OutboxService;
  readonly admin: OutboxAdmin;
  readonly dispatcher: OutboxDispatcher;
  /** The store the dispatcher uses (tests may wrap its methods to simulate stalls). */
  readonly store: OutboxStore;
  readonly publisher: RecordingPublisher;
  /** Every batch report, in order. */
  readonly reports: OutboxBatchReport[];
}

/** Boots an outbox module on `table` of `ds` with a recording publisher; `autoStart` off. */
export async function instance(
  ds: DataSource,
  table: string,
  instanceId: string,
  overrides: InstanceOverrides = {},
): Promise<Instance> {
  const publisher = new RecordingPublisher();
  const reports: OutboxBatchReport[] = [];
  const moduleRef = await Test.createTestingModule({
    imports: [
      OutboxModule.forRoot({
        dataSource: ds,
        tableName: table,
        publisher,
        instanceId,
        autoStart: false,
        observer: { onBatch: (report) => reports.push(report) },
        ...overrides,
        dispatcher: { pollIntervalMs: 50, listen: false, ...overrides.dispatcher },
      }),
    ],
  }).compile();
  await moduleRef.init();
  return {
    moduleRef,
    outbox: moduleRef.get(OutboxService),
    admin: moduleRef.get(OutboxAdmin),
    dispatcher: moduleRef.get(OutboxDispatcher),
    store: moduleRef.get<OutboxStore>(OUTBOX_STORE),
    publisher,
    reports,
  };
}
