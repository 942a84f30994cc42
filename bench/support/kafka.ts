/** Kafka helpers: reachability, topics, and counting what a topic holds. */
import { Kafka, logLevel, Partitioners, type Admin, type Producer } from 'kafkajs';
import { canConnect } from '../../test/support/services';
import { SERVICES } from './config';
import { sleep } from '../../test/support/wait-for';

export const KAFKA_PARTITIONS = 3;

export function kafkaClient(clientId = 'outbox-bench'): Kafka {
  return new Kafka({ clientId, brokers: [...SERVICES.kafka.brokers], logLevel: logLevel.NOTHING });
}

export async function kafkaReachable(): Promise<boolean> {
  const [host, port] = (SERVICES.kafka.brokers[0] ?? '127.0.0.1:9092').split(':');
  return canConnect(host ?? '127.0.0.1', Number(port));
}

export async function withAdmin<T>(fn: (admin: Admin) => Promise<T>): Promise<T> {
  const admin = kafkaClient('outbox-bench-admin').admin();
  await admin.connect();
  try {
    return await fn(admin);
  } finally {
    await admin.disconnect();
  }
}

/** Deletes and re-creates `topic` with {@link KAFKA_PARTITIONS} partitions. */
export async function resetTopic(topic: string): Promise<void> {
  await withAdmin(async (admin) => {
    const existing = await admin.listTopics();
    if (existing.includes(topic)) {
      await admin.deleteTopics({ topics: [topic], timeout: 10_000 });
      for (let i = 0; i < 50 && (await admin.listTopics()).includes(topic); i++) await sleep(200);
    }
    for (let attempt = 0; ; attempt++) {
      try {
        await admin.createTopics({
          topics: [{ topic, numPartitions: KAFKA_PARTITIONS, replicationFactor: 1 }],
          waitForLeaders: true,
          timeout: 10_000,
        });
        return;
      } catch (error) {
        if (attempt >= 20) throw error;
        await sleep(300);
      }
    }
  });
}

export async function deleteTopic(topic: string): Promise<void> {
  await withAdmin((admin) => admin.deleteTopics({ topics: [topic], timeout: 10_000 })).catch(
    () => undefined,
  );
}

/** Records in the topic (sum over partitions of high − low watermark). */
export async function topicCount(topic: string): Promise<number> {
  return withAdmin(async (admin) => {
    const offsets = await admin.fetchTopicOffsets(topic);
    return offsets.reduce((sum, p) => sum + Number(p.high) - Number(p.low), 0);
  });
}

/**
 * A plain kafkajs producer (the bare relay's), murmur2 partitioner, acks set per send; with
 * `idempotent`, the producer KafkaPublisher uses (idempotent, one request in flight).
 */
export async function bareProducer(idempotent = false): Promise<Producer> {
  const producer = kafkaClient('outbox-bench-bare').producer({
    createPartitioner: Partitioners.DefaultPartitioner,
    allowAutoTopicCreation: false,
    ...(idempotent ? { idempotent: true, maxInFlightRequests: 1 } : {}),
  });
  await producer.connect();
  return producer;
}

/**
 * Kafka is not a machine service here: like the test suites, start the project's local broker
 * (scripts/kafka.sh) when none answers. Resolves to a function that stops it again if we started it.
 */
export async function ensureKafka(log: (line: string) => void): Promise<(() => void) | undefined> {
  if (await kafkaReachable()) return () => undefined;
  if (process.env.BENCH_NO_KAFKA_START === '1') return undefined;
  const { execFileSync } = await import('node:child_process');
  const { join } = await import('node:path');
  const script = join(__dirname, '../../scripts/kafka.sh');
  log('Kafka is not running: starting the local broker (scripts/kafka.sh start)');
  try {
    execFileSync('bash', [script, 'start'], {
      stdio: ['ignore', 'ignore', 'inherit'],
      timeout: 300_000,
    });
  } catch (error) {
    log(`could not start Kafka: ${error instanceof Error ? error.message : String(error)}`);
    return undefined;
  }
  return () => {
    try {
      execFileSync('bash', [script, 'stop'], { stdio: 'ignore' });
    } catch {
      // already stopped
    }
  };
}
