import { OutboxOptionsError } from '../../errors/outbox-options.error';

/** The part of a NATS header set the publisher writes. */
export interface NatsHeaderSet {
  set(name: string, value: string): void;
}

interface NatsHeadersModule {
  headers(): NatsHeaderSet;
}

// Nest 12's ClientNats loads `@nats-io/transport-node`, Nest 10 and 11 load `nats`; an app has the
// one its Nest needs. Either package's header set is encoded by either connection the same way
// (both only call `encode()`, which writes the NATS/1.0 header block), so the first one found
// serves whichever connection ClientNats opened.
const NATS_CLIENT_PACKAGES = ['@nats-io/transport-node', 'nats'] as const;

/**
 * Returns a factory of NATS header sets from the NATS client package the app has installed. Both
 * are optional peers, so neither is imported at the top of the module; this runs only when a
 * `ClientProxyPublisher` is built on a `ClientNats`.
 */
export function loadNatsHeaders(
  load: (name: string) => unknown = defaultLoad,
): () => NatsHeaderSet {
  for (const name of NATS_CLIENT_PACKAGES) {
    let loaded: unknown;
    try {
      loaded = load(name);
    } catch (error) {
      if (isModuleNotFound(error, name)) continue;
      throw error;
    }
    const headers = (loaded as Partial<NatsHeadersModule> | null)?.headers;
    if (typeof headers === 'function') return () => headers();
  }
  throw new OutboxOptionsError(
    'ClientProxyPublisher on a ClientNats needs the NATS client package that Nest loads: ' +
      'npm install @nats-io/transport-node (NestJS 12) or npm install nats (NestJS 10 and 11).',
    'client',
  );
}

function defaultLoad(name: string): unknown {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require(name);
}

function isModuleNotFound(error: unknown, name: string): boolean {
  // Duck-typed, not `instanceof Error`: a loader's error may come from another realm (jest's).
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  // Only the package itself missing: a package that is there but fails to load is a real error.
  return (
    (code === 'MODULE_NOT_FOUND' || code === 'ERR_MODULE_NOT_FOUND') &&
    typeof message === 'string' &&
    message.includes(`'${name}'`)
  );
}
