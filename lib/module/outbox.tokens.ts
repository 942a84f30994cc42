import { OutboxAdmin } from './admin/outbox.admin';
import { DEFAULT_OUTBOX_NAME } from '../outbox.constants';
import { OutboxService } from '../outbox.service';
import { OutboxCleaner } from '../workers/outbox.cleaner';
import { OutboxDispatcher } from '../dispatch/outbox.dispatcher';
import { OutboxUnlocker } from '../workers/outbox.unlocker';
import { OutboxPartitionMaintainer } from '../workers/outbox.partition-maintainer';

/** The providers an `OutboxModule` instance exports. */
export type OutboxProviderType =
  | typeof OutboxService
  | typeof OutboxAdmin
  | typeof OutboxDispatcher
  | typeof OutboxUnlocker
  | typeof OutboxCleaner
  | typeof OutboxPartitionMaintainer;

/**
 * The injection token of one provider of the `OutboxModule` instance named `name`: the class
 * itself for the default instance, `nestjs-outbox:<name>:<Class>` for a named one (as
 * `getDataSourceToken` of @nestjs/typeorm and `getQueueToken` of @nestjs/bullmq do).
 *
 * Typed with the provider's class, so that `app.get()` of it is that class without a type
 * argument of its own.
 *
 * @example
 * await app.get(getOutboxToken('audit', OutboxDispatcher)).drain();
 */
export function getOutboxToken<P extends OutboxProviderType = typeof OutboxService>(
  name: string = DEFAULT_OUTBOX_NAME,
  provider?: P,
): string | P {
  // Without a provider, P is its default, typeof OutboxService.
  const type = provider ?? (OutboxService as P);
  return name === DEFAULT_OUTBOX_NAME ? type : `nestjs-outbox:${name}:${type.name}`;
}
