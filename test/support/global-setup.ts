import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { recordBaselineHandles } from './open-handles';
import { selectedSpecsNeedElasticMq, selectedSpecsNeedKafka } from './selected-specs';
import { canConnect, recordServiceStatus, SERVICES, type ServiceName } from './services';

// The integration and e2e projects' setup (the unit project has none). It probes the machine
// services every run of those projects needs. Kafka is not a machine service: when it is not
// running, the setup starts the project's local broker (scripts/kafka.sh, jars from Maven
// Central), a minute of JVM start, so it is probed only when a selected spec needs it; so is
// ElasticMQ, the SQS-compatible server (scripts/elasticmq.sh, the same way).
const ALWAYS: readonly ServiceName[] = ['postgres', 'mariadb', 'rabbitmq', 'nats', 'redis', 'mqtt'];

async function dockerAvailable(): Promise<boolean> {
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
    return true;
  } catch {
    return false;
  }
}

/** Starts a missing service with testcontainers and points the environment at it. */
async function startContainer(name: ServiceName): Promise<boolean> {
  const tc = await import('testcontainers');
  const images: Partial<
    Record<
      ServiceName,
      {
        image: string;
        port: number;
        env?: Record<string, string>;
        hostVar: string;
        portVar: string;
      }
    >
  > = {
    postgres: {
      image: 'postgres:16-alpine',
      port: 5432,
      env: { POSTGRES_HOST_AUTH_METHOD: 'trust', POSTGRES_DB: 'test' },
      hostVar: 'PGHOST',
      portVar: 'PGPORT',
    },
    mariadb: {
      image: 'mariadb:11',
      port: 3306,
      env: { MARIADB_ALLOW_EMPTY_ROOT_PASSWORD: '1', MARIADB_DATABASE: 'test' },
      hostVar: 'MYSQL_HOST',
      portVar: 'MYSQL_PORT',
    },
    rabbitmq: {
      image: 'rabbitmq:3.13-alpine',
      port: 5672,
      hostVar: 'RABBITMQ_HOST',
      portVar: 'RABBITMQ_PORT',
    },
    nats: { image: 'nats:2.10-alpine', port: 4222, hostVar: 'NATS_HOST', portVar: 'NATS_PORT' },
    redis: { image: 'redis:7-alpine', port: 6379, hostVar: 'REDIS_HOST', portVar: 'REDIS_PORT' },
    mqtt: { image: 'eclipse-mosquitto:2', port: 1883, hostVar: 'MQTT_HOST', portVar: 'MQTT_PORT' },
  };
  const spec = images[name];
  if (spec === undefined) return false;
  const container = await new tc.GenericContainer(spec.image)
    .withExposedPorts(spec.port)
    .withEnvironment(spec.env ?? {})
    .withWaitStrategy(tc.Wait.forListeningPorts())
    .start();
  process.env[spec.hostVar] = container.getHost();
  process.env[spec.portVar] = String(container.getMappedPort(spec.port));
  const started =
    (globalThis as { __outboxContainers?: { stop(): Promise<unknown> }[] }).__outboxContainers ??
    [];
  started.push(container);
  (globalThis as { __outboxContainers?: unknown[] }).__outboxContainers = started;
  return true;
}

/** Starts the project's own Kafka or ElasticMQ (scripts/<name>.sh); false when it could not. */
function startLocal(script: 'kafka' | 'elasticmq', startedVar: string): boolean {
  try {
    const out = execFileSync('bash', [join(__dirname, `../../scripts/${script}.sh`), 'start'], {
      stdio: ['ignore', 'pipe', 'inherit'],
      timeout: 300_000,
      encoding: 'utf8',
    });
    process.stdout.write(out);
    // `start` answers "already running" when a server came up since the probe (another run's,
    // or one started by hand): that server is not this run's, so the teardown leaves it alone.
    if (!/already running/.test(out)) process.env[startedVar] = '1';
    return true;
  } catch {
    return false;
  }
}

export default async function globalSetup(): Promise<void> {
  recordBaselineHandles();
  const ci = process.env.CI === 'true';
  const status: Partial<Record<ServiceName, string | true>> = {};
  let docker: boolean | undefined;
  const required: ServiceName[] = [...ALWAYS];
  if (selectedSpecsNeedKafka()) required.push('kafka');
  if (selectedSpecsNeedElasticMq()) required.push('elasticmq');
  for (const name of required) {
    const { host, port } = SERVICES[name];
    if (await canConnect(host, port)) {
      status[name] = true;
      continue;
    }
    if (name === 'kafka' && startLocal('kafka', 'OUTBOX_TEST_STARTED_KAFKA')) {
      status[name] = true;
      continue;
    }
    if (name === 'elasticmq' && startLocal('elasticmq', 'OUTBOX_TEST_STARTED_ELASTICMQ')) {
      status[name] = true;
      continue;
    }
    docker ??= await dockerAvailable();
    if (docker && (await startContainer(name).catch(() => false))) {
      status[name] = true;
      continue;
    }
    status[name] =
      `not reachable at ${host}:${port}${docker ? '' : ' and no Docker engine for testcontainers'}`;
  }
  if (status.postgres === true) {
    // Schemas the suites use; the database itself is `test`.
    try {
      execFileSync(
        'psql',
        [
          '-h',
          SERVICES.postgres.host,
          '-p',
          String(SERVICES.postgres.port),
          '-U',
          process.env.PGUSER ?? 'postgres',
          '-d',
          'test',
          '-qc',
          'CREATE SCHEMA IF NOT EXISTS outbox_test',
        ],
        { stdio: 'ignore' },
      );
    } catch {
      // psql missing: the suites create what they need themselves.
    }
  }
  recordServiceStatus(status);
  const missing = Object.entries(status).filter(([, s]) => s !== true);
  if (missing.length > 0) {
    const lines = missing.map(([name, reason]) => `  - ${name}: ${String(reason)}`).join('\n');
    if (ci) {
      throw new Error(`CI=true and required services are missing:\n${lines}`);
    }
    process.stderr.write(
      `\n*** nestjs-outbox tests: suites needing these services are SKIPPED ***\n${lines}\n\n`,
    );
  }
}
