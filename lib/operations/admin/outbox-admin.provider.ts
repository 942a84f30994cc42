import type { Provider } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import type { OutboxStore } from '../../store/outbox-store.port';
import { OUTBOX_DATA_SOURCE, OUTBOX_OPTIONS, OUTBOX_STORE } from '../../outbox.constants';
import type { ResolvedOutboxOptions } from '../../options/resolve-outbox-options';
import { OutboxAdmin } from './outbox.admin';

/**
 * `OutboxAdmin` built from the module's store, DataSource and options. A factory rather than
 * constructor injection, so that the class stays free of Nest and the CLI can build it alone.
 */
export const OUTBOX_ADMIN_PROVIDER: Provider = {
  provide: OutboxAdmin,
  inject: [OUTBOX_DATA_SOURCE, OUTBOX_STORE, OUTBOX_OPTIONS],
  useFactory: (dataSource: DataSource, store: OutboxStore, options: ResolvedOutboxOptions) =>
    new OutboxAdmin(dataSource, store, options),
};
