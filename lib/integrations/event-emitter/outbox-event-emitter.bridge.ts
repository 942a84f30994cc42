import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import type { EventEmitter2 } from '@nestjs/event-emitter';
import type { OutboxService } from '../../outbox.service';
import type { ResolvedOutboxBridgeOptions } from '../bridge/outbox-bridge.options';
import { isOutboxEvent, OutboxBridgeWriter } from '../bridge/outbox-bridge.writer';

type Emit = EventEmitter2['emit'];
type EmitAsync = EventEmitter2['emitAsync'];

/**
 * Stands in front of the app's `EventEmitter2` from module init to module destroy: an `emitAsync`
 * whose first value is an `@OutboxEvent` instance becomes an outbox write in the current
 * transaction (the promise settles with the write; no listener runs now), a synchronous `emit`
 * of one inside a transaction is refused, and every other emit reaches the listeners untouched.
 * The event name is not written: the outbox row takes its topic, type and key from
 * `@OutboxEvent`.
 */
export class OutboxEventEmitterBridge implements OnModuleInit, OnModuleDestroy {
  /** The emitter's own `emit`/`emitAsync` properties before ours (usually none: prototype methods). */
  private originals: { emit?: Emit; emitAsync?: EmitAsync } | undefined;
  private installed: { emit: Emit; emitAsync: EmitAsync } | undefined;

  constructor(
    private readonly emitter: EventEmitter2,
    private readonly outbox: OutboxService<unknown>,
    private readonly options: ResolvedOutboxBridgeOptions,
  ) {}

  onModuleInit(): void {
    if (this.installed !== undefined) return;
    const emitter = this.emitter;
    // The emitter's own methods, bound: listeners keep seeing `this` as the emitter.
    const emit: Emit = emitter.emit.bind(emitter);
    const emitAsync: EmitAsync = emitter.emitAsync.bind(emitter);
    const sync = new OutboxBridgeWriter(this.outbox, this.options, 'EventEmitter2.emit()');
    const async = new OutboxBridgeWriter(this.outbox, this.options, 'EventEmitter2.emitAsync()');
    const installed = {
      emit: ((event, ...values: unknown[]) => {
        if (isOutboxEvent(values[0])) sync.handOnOrThrow();
        return emit(event, ...values);
      }) as Emit,
      emitAsync: ((event, ...values: unknown[]) => {
        const first = values[0];
        if (isOutboxEvent(first)) {
          const written = async.write([first]);
          // What emitAsync resolves to: the answers of the listeners, of which none ran.
          if (written !== undefined) return written.then((): unknown[] => []);
        }
        return emitAsync(event, ...values);
      }) as EmitAsync,
    };
    // Own properties only (usually there are none: the methods live on the prototype).
    const own = emitter as { emit?: Emit; emitAsync?: EmitAsync };
    this.originals = {
      ...(Object.hasOwn(emitter, 'emit') ? { emit: own.emit } : {}),
      ...(Object.hasOwn(emitter, 'emitAsync') ? { emitAsync: own.emitAsync } : {}),
    };
    this.installed = installed;
    emitter.emit = installed.emit;
    emitter.emitAsync = installed.emitAsync;
  }

  onModuleDestroy(): void {
    const { originals, installed } = this;
    if (originals === undefined || installed === undefined) return;
    // Only what is still ours: a later wrapper keeps its place.
    const emitter = this.emitter as { emit?: Emit; emitAsync?: EmitAsync };
    if (emitter.emit === installed.emit) {
      if (originals.emit === undefined) delete emitter.emit;
      else emitter.emit = originals.emit;
    }
    if (emitter.emitAsync === installed.emitAsync) {
      if (originals.emitAsync === undefined) delete emitter.emitAsync;
      else emitter.emitAsync = originals.emitAsync;
    }
    this.originals = undefined;
    this.installed = undefined;
  }
}
