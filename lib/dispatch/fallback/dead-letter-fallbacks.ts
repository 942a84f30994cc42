import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import { OutboxMessages } from '../../outbox.messages';
import {
  getOutboxDeadLetterSubscriptions,
  type OutboxFallbackResult,
} from './on-outbox-dead-letter.decorator';

/** One event type's fallback, bound to its provider instance. */
export interface DeadLetterFallback {
  /** `Class.method`, for the logs. */
  readonly name: string;
  readonly call: (record: OutboxRecord, error: unknown) => unknown;
}

/** The fallbacks the pipeline asks for by event type. */
export interface DeadLetterFallbackLookup {
  fallbackFor(eventType: string): DeadLetterFallback | undefined;
}

/** Whether a fallback's answer settles the message. */
export function settlesMessage(answer: unknown): boolean {
  return (
    answer !== null &&
    typeof answer === 'object' &&
    (answer as Partial<OutboxFallbackResult>).settled === true
  );
}

/**
 * Finds the `@OnOutboxDeadLetter()` methods of the app's providers for one outbox instance, as
 * `@OnOutboxMessage()` handlers are found: every singleton provider's prototype methods, once,
 * after every provider was instantiated (the first lookup, or `explore()` at module init).
 */
export class DeadLetterFallbacks implements DeadLetterFallbackLookup {
  private byType: Map<string, DeadLetterFallback> | undefined;

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    /** The outbox instance's name: fallbacks given another `outbox` are not its own. */
    private readonly outbox: string,
  ) {}

  onModuleInit(): void {
    this.explore();
  }

  fallbackFor(eventType: string): DeadLetterFallback | undefined {
    return this.explore().get(eventType);
  }

  /** Every fallback of this instance, by event type; two for one type fail the bootstrap. */
  explore(): ReadonlyMap<string, DeadLetterFallback> {
    if (this.byType !== undefined) return this.byType;
    const byType = new Map<string, DeadLetterFallback>();
    const seen = new Set<object>();
    for (const wrapper of this.discovery.getProviders()) {
      if (wrapper.isAlias) continue;
      const instance: unknown = wrapper.instance;
      const className = (wrapper.metatype as { name?: string } | null | undefined)?.name;
      if (!wrapper.isDependencyTreeStatic() || wrapper.isTransient) {
        const prototype: unknown = (wrapper.metatype as { prototype?: unknown } | null | undefined)
          ?.prototype;
        const method = this.fallbackMethods(prototype)[0];
        if (method !== undefined) {
          throw new OutboxOptionsError(
            OutboxMessages.badFallback(
              `${className ?? 'provider'}.${method} is on a request-scoped or transient provider; make it a singleton`,
            ),
            'scope',
          );
        }
        continue;
      }
      if (instance === null || typeof instance !== 'object' || seen.has(instance)) continue;
      const prototype: unknown = Object.getPrototypeOf(instance);
      const methods = this.fallbackMethods(prototype);
      if (methods.length === 0 || prototype === null || typeof prototype !== 'object') continue;
      seen.add(instance);
      for (const method of methods) {
        const fn = (instance as Record<string, unknown>)[method];
        if (typeof fn !== 'function') continue;
        const name = `${(instance as { constructor: { name: string } }).constructor.name}.${method}`;
        for (const { type, outbox } of getOutboxDeadLetterSubscriptions(prototype, method)) {
          if (outbox !== undefined && outbox !== this.outbox) continue;
          const earlier = byType.get(type);
          if (earlier !== undefined) {
            throw new OutboxOptionsError(
              OutboxMessages.badFallback(
                `${name} and ${earlier.name} are both fallbacks of ${JSON.stringify(type)}; give each event type one`,
              ),
              'type',
            );
          }
          byType.set(type, {
            name,
            call: (record, error) =>
              (fn as (r: OutboxRecord, e: unknown) => unknown).call(instance, record, error),
          });
        }
      }
    }
    this.byType = byType;
    return byType;
  }

  private fallbackMethods(prototype: unknown): string[] {
    if (prototype === null || typeof prototype !== 'object') return [];
    return this.scanner
      .getAllMethodNames(prototype)
      .filter((name) => getOutboxDeadLetterSubscriptions(prototype, name).length > 0);
  }
}
