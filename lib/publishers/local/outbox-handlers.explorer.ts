import { Injectable } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { getOutboxHandlerSubscriptions } from './on-outbox-message.decorator';
import { LocalMessages } from './local.messages';
import type { OutboxHandlerMessage } from './outbox-handler-message.interface';

/** One `@OnOutboxMessage()` subscription of one method of one provider instance. */
export interface OutboxHandlerBinding {
  readonly topic: string;
  /** Only this event type, or every type of the topic. */
  readonly type: string | undefined;
  /** `Class.method`, for logs and errors. */
  readonly name: string;
  readonly call: (message: OutboxHandlerMessage) => unknown;
}

/**
 * Finds the `@OnOutboxMessage()` methods on the app's providers, as @nestjs/event-emitter and
 * @nestjs/cqrs find theirs: every provider instance of every module, its prototype's methods,
 * their metadata. Run once, after every provider was instantiated.
 */
@Injectable()
export class OutboxHandlersExplorer {
  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
  ) {}

  explore(): OutboxHandlerBinding[] {
    const bindings: OutboxHandlerBinding[] = [];
    // A provider exported by several modules is one instance: bind its methods once.
    const seen = new Set<object>();
    for (const wrapper of this.discovery.getProviders()) {
      if (wrapper.isAlias) continue;
      const instance: unknown = wrapper.instance;
      const metatype: unknown = wrapper.metatype;
      const className = (metatype as { name?: string } | null | undefined)?.name ?? 'provider';
      if (!wrapper.isDependencyTreeStatic() || wrapper.isTransient) {
        // No instance to deliver to after a commit: refuse rather than skip a handler silently.
        const prototype: unknown = (metatype as { prototype?: unknown } | null | undefined)
          ?.prototype;
        const method = this.handlerMethods(prototype)[0];
        if (method !== undefined) {
          throw new OutboxOptionsError(
            LocalMessages.notSingleton(`${className}.${method}`),
            'scope',
          );
        }
        continue;
      }
      if (instance === null || typeof instance !== 'object' || seen.has(instance)) continue;
      const prototype: unknown = Object.getPrototypeOf(instance);
      const methods = this.handlerMethods(prototype);
      if (methods.length === 0 || prototype === null || typeof prototype !== 'object') continue;
      seen.add(instance);
      for (const method of methods) {
        const fn = (instance as Record<string, unknown>)[method];
        if (typeof fn !== 'function') continue;
        const call = (message: OutboxHandlerMessage): unknown =>
          (fn as (m: OutboxHandlerMessage) => unknown).call(instance, message);
        for (const { topic, type } of getOutboxHandlerSubscriptions(prototype, method)) {
          bindings.push({
            topic,
            type,
            name: `${(instance as { constructor: { name: string } }).constructor.name}.${method}`,
            call,
          });
        }
      }
    }
    return bindings;
  }

  private handlerMethods(prototype: unknown): string[] {
    if (prototype === null || typeof prototype !== 'object') return [];
    return this.scanner
      .getAllMethodNames(prototype)
      .filter((name) => getOutboxHandlerSubscriptions(prototype, name).length > 0);
  }
}
