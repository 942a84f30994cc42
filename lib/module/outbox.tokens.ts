import type { Type } from '@nestjs/common';
import { OutboxAdmin } from '../operations/admin/outbox.admin';
import { DEFAULT_OUTBOX_NAME } from '../outbox.constants';
import { OutboxService } from '../outbox.service';
import { OutboxCleaner } from '../dispatch/outbox.cleaner';
import { OutboxDispatcher } from '../dispatch/outbox.dispatcher';
import { OutboxUnlocker } from '../dispatch/outbox.unlocker';
import { OutboxPartitionMaintainer } from '../dispatch/outbox.partition-maintainer';

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
 * @example
 * app.get(getOutboxToken('audit', OutboxDispatcher)).drain();
 */
export function getOutboxToken(
  name: string = DEFAULT_OUTBOX_NAME,
  provider: OutboxProviderType = OutboxService,
): string | Type<unknown> {
  return name === DEFAULT_OUTBOX_NAME ? provider : `nestjs-outbox:${name}:${provider.name}`;
}
