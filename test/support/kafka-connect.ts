import { Kafka, logLevel, type Consumer } from 'kafkajs';
import type { DebeziumConnectorDefinition } from '../../lib/debezium';
import { SERVICES } from './services';
import { waitFor } from './wait-for';

// The Kafka Connect worker of scripts/kafka-connect.sh (npm run connect:start), driven through its
// REST API, and a kafkajs consumer that collects what Debezium wrote to the topics.

export const CONNECT_URL = `http://127.0.0.1:${process.env.CONNECT_PORT ?? '8083'}`;
export const KAFKA_BROKERS = [`${SERVICES.kafka.host}:${SERVICES.kafka.port}`];

async function connect(method: string, path: string, body?: unknown): Promise<unknown> {
  const response = await fetch(`${CONNECT_URL}${path}`, {
    method,
    headers: { 'content-type': 'application/json', accept: 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (response.status === 404) return null;
  if (!response.ok) {
    throw new Error(`Kafka Connect ${method} ${path}: ${response.status} ${text}`);
  }
  return text === '' ? null : (JSON.parse(text) as unknown);
}

/** Fails with the command to run when no worker answers. */
export async function expectConnectRunning(): Promise<void> {
  try {
    const plugins = (await connect('GET', '/connector-plugins')) as { class: string }[];
    if (!plugins.some((p) => p.class.includes('PostgresConnector'))) {
      throw new Error('the worker has no Debezium PostgreSQL connector on its plugin.path');
    }
  } catch (error) {
    throw new Error(
      `No Kafka Connect worker with Debezium at ${CONNECT_URL} (${String(error)}): run npm run connect:start`,
    );
  }
}

interface ConnectorStatus {
  connector?: { state: string };
  tasks?: { state: string; trace?: string }[];
}

/** Registers the connector and waits until it and its task run. */
export async function createConnector(definition: DebeziumConnectorDefinition): Promise<void> {
  await connect('POST', '/connectors', definition);
  await waitFor(
    `connector ${definition.name} running`,
    async () => {
      const status = (await connect(
        'GET',
        `/connectors/${definition.name}/status`,
      )) as ConnectorStatus | null;
      const failed = status?.tasks?.find((t) => t.state === 'FAILED');
      if (failed !== undefined) throw new Error(`connector task failed: ${failed.trace ?? ''}`);
      return (
        status?.connector?.state === 'RUNNING' &&
        status.tasks?.length === 1 &&
        status.tasks[0]?.state === 'RUNNING'
      );
    },
    { timeoutMs: 60_000, intervalMs: 250 },
  );
}

export async function deleteConnector(name: string): Promise<void> {
  await connect('DELETE', `/connectors/${name}`);
  await waitFor(
    `connector ${name} deleted`,
    async () => (await connect('GET', `/connectors/${name}`)) === null,
    { timeoutMs: 30_000, intervalMs: 250 },
  );
}

/** One record as Debezium wrote it. */
export interface ReceivedRecord {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
  readonly key: string | null;
  readonly value: string | null;
  readonly headers: Readonly<Record<string, string>>;
}

/** Collects every record of `topics` from their beginning, until `stop()`. */
export async function collectTopics(
  topics: readonly string[],
  groupId: string,
): Promise<{ records: ReceivedRecord[]; stop: () => Promise<void> }> {
  const kafka = new Kafka({
    brokers: KAFKA_BROKERS,
    clientId: groupId,
    logLevel: logLevel.NOTHING,
  });
  const admin = kafka.admin();
  await admin.connect();
  try {
    // Made before the consumer subscribes, so that it never waits for a topic to appear.
    await admin.createTopics({
      topics: topics.map((topic) => ({ topic, numPartitions: 3, replicationFactor: 1 })),
      waitForLeaders: true,
    });
  } finally {
    await admin.disconnect();
  }
  const consumer: Consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 100 });
  await consumer.connect();
  await consumer.subscribe({ topics: [...topics], fromBeginning: true });
  const records: ReceivedRecord[] = [];
  await consumer.run({
    eachMessage: ({ topic, partition, message }) => {
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(message.headers ?? {})) {
        if (value !== undefined) headers[name] = String(Array.isArray(value) ? value[0] : value);
      }
      records.push({
        topic,
        partition,
        offset: Number(message.offset),
        key: message.key?.toString('utf8') ?? null,
        value: message.value?.toString('utf8') ?? null,
        headers,
      });
      return Promise.resolve();
    },
  });
  return { records, stop: () => consumer.disconnect() };
}

/** Pauses (`pause`) or resumes (`resume`) the connector, and waits until its task says so. */
export async function setConnectorState(name: string, state: 'pause' | 'resume'): Promise<void> {
  await connect('PUT', `/connectors/${name}/${state}`);
  const wanted = state === 'pause' ? 'PAUSED' : 'RUNNING';
  await waitFor(
    `connector ${name} ${wanted}`,
    async () => {
      const status = (await connect('GET', `/connectors/${name}/status`)) as ConnectorStatus | null;
      return status?.tasks?.[0]?.state === wanted;
    },
    { timeoutMs: 30_000, intervalMs: 100 },
  );
}
