import { Inbox } from './inbox';

/**
 * The {@link Inbox} as a Nest provider: `InboxModule` builds it for the configured DataSource
 * and table. Inject it by this class.
 */
export class InboxService extends Inbox {}
