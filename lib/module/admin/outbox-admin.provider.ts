import type { Provider } from '@nestjs/common';
import type { OutboxStore } from '../../store/ports/outbox-store.port';
import type { SqlPort } from '../../store/ports/sql-port';
import { OUTBOX_OPTIONS, OUTBOX_SQL, OUTBOX_STORE } from '../../outbox.constants';
import type { ResolvedOutboxOptions } from '../../options/resolve-outbox-options';
import { OutboxAdmin } from './outbox.admin';

/**
 * `OutboxAdmin` built from the module's store, SQL port and options. A factory rather than
 * constructor injection, so that the class stays free of Nest and the CLI can build it alone.
 */
export const OUTBOX_ADMIN_PROVIDER: Provider = {
  provide: OutboxAdmin,
  inject: [OUTBOX_SQL, OUTBOX_STORE, OUTBOX_OPTIONS],
  useFactory: (sql: SqlPort, store: OutboxStore, options: ResolvedOutboxOptions) =>
    new OutboxAdmin(sql, store, options),
};
