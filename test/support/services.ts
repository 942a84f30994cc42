import { Socket } from 'node:net';

/** The real services the suites run against; settings come from the environment. */
export const SERVICES = {
  postgres: { host: process.env.PGHOST ?? '127.0.0.1', port: Number(process.env.PGPORT ?? 5432) },
  mariadb: {
    host: process.env.MYSQL_HOST ?? '127.0.0.1',
    port: Number(process.env.MYSQL_PORT ?? 3306),
  },
  rabbitmq: {
    host: process.env.RABBITMQ_HOST ?? '127.0.0.1',
    port: Number(process.env.RABBITMQ_PORT ?? 5672),
  },
  nats: { host: process.env.NATS_HOST ?? '127.0.0.1', port: Number(process.env.NATS_PORT ?? 4222) },
  redis: {
    host: process.env.REDIS_HOST ?? '127.0.0.1',
    port: Number(process.env.REDIS_PORT ?? 6379),
  },
  mqtt: { host: process.env.MQTT_HOST ?? '127.0.0.1', port: Number(process.env.MQTT_PORT ?? 1883) },
  kafka: {
    host: process.env.KAFKA_HOST ?? '127.0.0.1',
    port: Number(process.env.KAFKA_PORT ?? 9092),
  },
  elasticmq: {
    host: process.env.ELASTICMQ_HOST ?? '127.0.0.1',
    port: Number(process.env.ELASTICMQ_PORT ?? 9324),
  },
} as const;

export type ServiceName = keyof typeof SERVICES;

const STATUS_VAR = 'OUTBOX_TEST_SERVICES';

export function canConnect(host: string, port: number, timeoutMs = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('error', () => done(false));
    socket.connect(port, host, () => done(true));
  });
}

/** Written by the global setup: which services answered, for the synchronous describe blocks. */
export function recordServiceStatus(status: Partial<Record<ServiceName, string | true>>): void {
  process.env[STATUS_VAR] = JSON.stringify(status);
}

function recordedStatus(): Partial<Record<ServiceName, string | true>> {
  const raw = process.env[STATUS_VAR];
  return raw === undefined ? {} : (JSON.parse(raw) as Partial<Record<ServiceName, string | true>>);
}

/** true when reachable, otherwise the reason it is not. */
export function serviceStatus(name: ServiceName): true | string {
  return recordedStatus()[name] ?? notProbed(name);
}

function notProbed(name: ServiceName): string {
  if (name === 'kafka' || name === 'elasticmq') {
    return `not probed (the global setup starts ${name === 'kafka' ? 'Kafka' : 'ElasticMQ'} only for specs whose source mentions it, see test/support/selected-specs.ts)`;
  }
  return 'not probed (no global setup ran: the unit project has none, so a spec needing services is not a *.unit.spec.ts)';
}

/**
 * `describe` for a suite that needs real services. When one is missing the suite is skipped with
 * the reason in its name (and the global setup has already printed it); under CI=true the global
 * setup fails the run instead, so a missing service can never pass silently. A service the setup
 * did not probe at all (a spec it did not expect to need it) fails the suite under CI=true for
 * the same reason.
 */
export function describeWith(services: readonly ServiceName[], name: string, fn: () => void): void {
  const missing = services
    .map((s) => [s, serviceStatus(s)] as const)
    .filter(([, status]) => status !== true);
  if (missing.length === 0) {
    describe(name, fn);
    return;
  }
  const reason = missing.map(([s, status]) => `${s}: ${String(status)}`).join('; ');
  const recorded = recordedStatus();
  if (process.env.CI === 'true' && missing.some(([s]) => recorded[s] === undefined)) {
    describe(name, () =>
      it(`needs ${missing.map(([s]) => s).join(', ')}`, () => {
        throw new Error(`CI=true and ${reason}`);
      }),
    );
  } else {
    describe.skip(`${name} [skipped: ${reason}]`, fn);
  }
}

function canResolve(name: string): boolean {
  try {
    require.resolve(name);
    return true;
  } catch {
    return false;
  }
}

/**
 * `describeWith`, for a suite that also needs npm packages (the optional peers a transport's
 * client loads). A missing package skips the suite with the reason in its name, or under CI=true
 * fails the run, just like a missing service.
 */
export function describeWithPackages(
  services: readonly ServiceName[],
  packages: readonly string[],
  name: string,
  fn: () => void,
): void {
  const missing = packages.filter((p) => !canResolve(p));
  if (missing.length === 0) {
    describeWith(services, name, fn);
    return;
  }
  const reason = `npm package(s) not installed: ${missing.join(', ')}`;
  if (process.env.CI === 'true') {
    describe(name, () =>
      it(`needs ${missing.join(', ')}`, () => {
        throw new Error(`CI=true and ${reason}`);
      }),
    );
  } else {
    process.stderr.write(`\n*** ${name}: SKIPPED, ${reason} ***\n`);
    describe.skip(`${name} [skipped: ${reason}]`, fn);
  }
}
