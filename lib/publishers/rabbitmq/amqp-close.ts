import type { EventEmitter } from 'node:events';

/** An amqplib connection (`ChannelModel`) or channel. */
type Closable = EventEmitter & { close(): Promise<void> };

/**
 * Closes an amqplib connection or channel, and resolves once it is closed, however that comes
 * about. amqplib settles `close()` only when the server answers it: when the socket ends first,
 * it emits 'close' and leaves the promise pending for good, and whoever awaited it (a shutdown,
 * a connect, a batch) would hang. Never rejects: a close that fails leaves nothing to do.
 */
export async function closeAmqp(target: Closable): Promise<void> {
  let onClose = (): void => undefined;
  const closed = new Promise<void>((resolve) => {
    onClose = resolve;
    target.once('close', onClose);
  });
  try {
    await Promise.race([target.close().catch(() => undefined), closed]);
  } finally {
    target.off('close', onClose);
  }
}

/** amqplib's connection inside a `ChannelModel`: its socket and heartbeat, not in its types. */
interface AmqpInternals {
  readonly connection?: {
    readonly stream?: { destroy?: () => void };
    readonly heartbeater?: { clear?: () => void };
  };
}

/**
 * Ends a connection's socket at once, for a close the server does not answer within the time
 * allowed (a broker that hangs with the socket open). A destroyed socket emits no 'end', so
 * amqplib never runs its own close and would keep its heartbeat intervals, and with them the
 * process, alive: they are stopped here.
 */
export function destroyAmqpSocket(connection: unknown): void {
  const inner = (connection as AmqpInternals).connection;
  inner?.stream?.destroy?.();
  inner?.heartbeater?.clear?.();
}
