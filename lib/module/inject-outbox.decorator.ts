import { Inject } from '@nestjs/common';
import { OutboxAdmin } from './admin/outbox.admin';
import { getOutboxToken } from './outbox.tokens';

/**
 * Injects the `OutboxService` of the `OutboxModule` instance named `name` (the default instance
 * when left out, which plain `OutboxService` injection gets too).
 *
 * @example
 * constructor(@InjectOutbox('audit') private readonly audit: OutboxService) {}
 */
export function InjectOutbox(name?: string): PropertyDecorator & ParameterDecorator {
  return Inject(getOutboxToken(name));
}

/** Injects the `OutboxAdmin` of the `OutboxModule` instance named `name` (default when left out). */
export function InjectOutboxAdmin(name?: string): PropertyDecorator & ParameterDecorator {
  return Inject(getOutboxToken(name, OutboxAdmin));
}
