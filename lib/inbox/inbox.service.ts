import type { EntityManager } from 'typeorm';
import { Inbox } from './inbox';

/**
 * The {@link Inbox} as a Nest provider: `InboxModule` builds it for the configured DataSource
 * (or connection) and table. Inject it by this class; on a connection, type it with your
 * library's transaction handle (`InboxService<PoolClient>`) for `recordOnce`.
 */
export class InboxService<Tx = EntityManager> extends Inbox<Tx> {}
