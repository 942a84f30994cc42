/**
 * P1-SQS: the P1 drain (PostgreSQL, one dispatcher, ordering on, 1 000 keys, 1 KiB payloads) to a
 * FIFO queue on ElasticMQ with SqsPublisher, beside the bare client's ceiling: the same SQS client
 * sending the same messages (body, attributes, group and deduplication ids) with
 * `SendMessageBatch`, ten a call, as many calls in flight as the publisher's
 * `maxConcurrentRequests`, and no database. The module's runs are checked at the queue (it must
 * hold every message once).
 */
import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import {
  CreateQueueCommand,
  DeleteQueueCommand,
  GetQueueAttributesCommand,
  SendMessageBatchCommand,
  SQSClient,
  type SendMessageBatchRequestEntry,
} from '@aws-sdk/client-sqs';
import { ConcurrencyLimit } from '../../lib/internal/concurrency-limit';
import { awsMessageParts } from '../../lib/publishers/aws/aws-message-attributes';
import { SqsPublisher } from '../../lib/publishers/sqs';
import { canConnect } from '../../test/support/services';
import { KEYS, PAYLOAD_BYTES, named } from '../support/config';
import {
  analyse,
  keyOf,
  PAD,
  resetOutboxTable,
  seedOutbox,
  truncateOutbox,
} from '../support/databases';
import { drainAll, measured, startOutboxApp } from '../support/outbox-app';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { timedWithCpu } from '../support/node-cpu';
import { ratio, round } from '../support/stats';

const TABLE = named('bench_p1_sqs');
const HOST = process.env.ELASTICMQ_HOST ?? '127.0.0.1';
const PORT = Number(process.env.ELASTICMQ_PORT ?? 9324);
const CONCURRENCY = 10; // SqsPublisher's default maxConcurrentRequests
export const clientConfig = {
  endpoint: `http://${HOST}:${PORT}`,
  region: 'elasticmq',
  credentials: { accessKeyId: 'bench', secretAccessKey: 'bench' },
};

/**
 * ElasticMQ, running: started when it is not (the answer then stops it); undefined when it
 * cannot be started.
 */
export async function ensureElasticMq(
  log: (line: string) => void,
): Promise<(() => void) | undefined> {
  if (await canConnect(HOST, PORT)) return () => undefined;
  const { execFileSync } = await import('node:child_process');
  const { join } = await import('node:path');
  const script = join(__dirname, '../../scripts/elasticmq.sh');
  log('ElasticMQ is not running: starting it (scripts/elasticmq.sh start)');
  try {
    execFileSync('bash', [script, 'start'], {
      stdio: ['ignore', 'ignore', 'inherit'],
      timeout: 300_000,
    });
  } catch (error) {
    log(`could not start ElasticMQ: ${error instanceof Error ? error.message : String(error)}`);
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

async function freshQueue(sqs: SQSClient, prefix: string): Promise<{ name: string; url: string }> {
  const name = `${named(prefix, '-')}-${randomUUID().slice(0, 8)}.fifo`;
  const { QueueUrl } = await sqs.send(
    new CreateQueueCommand({ QueueName: name, Attributes: { FifoQueue: 'true' } }),
  );
  return { name, url: QueueUrl ?? '' };
}

async function depth(sqs: SQSClient, url: string): Promise<number> {
  const { Attributes = {} } = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: url,
      AttributeNames: ['ApproximateNumberOfMessages'],
    }),
  );
  return Number(Attributes.ApproximateNumberOfMessages ?? 0);
}

/** The messages the module sends for the seeded rows, built the way SqsPublisher builds them. */
function bareEntries(n: number): Omit<SendMessageBatchRequestEntry, 'Id'>[] {
  return Array.from({ length: n }, (_, i) => {
    const seq = i + 1;
    const key = keyOf(seq, KEYS);
    const messageId = randomUUID();
    const payload = `{"seq":${seq},"key":"${key}","pad":"${PAD}"}`;
    const parts = awsMessageParts({ messageId, type: 'order.created', key, headers: {}, payload });
    return {
      MessageBody: parts.body,
      MessageAttributes: parts.attributes,
      MessageGroupId: key,
      MessageDeduplicationId: messageId,
    };
  });
}

/** The bare client: the same messages in calls of ten, CONCURRENCY calls in flight. */
async function bareSend(
  sqs: SQSClient,
  url: string,
  entries: readonly Omit<SendMessageBatchRequestEntry, 'Id'>[],
): Promise<void> {
  const limit = new ConcurrencyLimit(CONCURRENCY);
  const signal = new AbortController().signal;
  // Every call waiting for a slot listens to it, as the publisher's calls listen to a publish's.
  setMaxListeners(entries.length, signal);
  const calls: Promise<void>[] = [];
  for (let i = 0; i < entries.length; i += 10) {
    const chunk = entries.slice(i, i + 10).map((e, j) => ({ ...e, Id: String(j) }));
    calls.push(
      limit.run(async () => {
        const answer = await sqs.send(
          new SendMessageBatchCommand({ QueueUrl: url, Entries: chunk }),
        );
        if ((answer.Failed ?? []).length > 0)
          throw new Error(`bare send refused: ${JSON.stringify(answer.Failed)}`);
      }, signal),
    );
  }
  await Promise.all(calls);
}

export async function p1Sqs(ctx: BenchContext): Promise<ScenarioResult> {
  const n = ctx.profile.p1Messages;
  const result = newResult(
    'P1-SQS',
    `Drain PostgreSQL → SQS (ElasticMQ, a FIFO queue), 1 dispatcher, ordering on, 1 000 keys, ${PAYLOAD_BYTES / 1024} KiB payloads (${n.toLocaleString('en-US')} msgs)`,
  );
  const stop = await ensureElasticMq(ctx.log);
  if (stop === undefined) {
    result.skipped.push(
      `ElasticMQ is not reachable at ${HOST}:${PORT} and could not be started: start it with \`npm run elasticmq:start\``,
    );
    return result;
  }
  const sqs = new SQSClient(clientConfig);
  try {
    return await measure(ctx, result, sqs, n);
  } finally {
    sqs.destroy();
    stop();
  }
}

async function measure(
  ctx: BenchContext,
  result: ScenarioResult,
  sqs: SQSClient,
  n: number,
): Promise<ScenarioResult> {
  const { pg } = ctx;
  await resetOutboxTable(pg, TABLE);
  const prepare = async (count: number): Promise<void> => {
    await truncateOutbox(pg, TABLE);
    await seedOutbox(pg, TABLE, count);
    await analyse(pg, TABLE);
  };
  const moduleRates: number[] = [];
  const bareRates: number[] = [];
  const moduleCpu: number[] = [];
  const bareCpu: number[] = [];
  let wrongCount = 0;
  const queues: string[] = [];
  // One publisher whose queue changes per run: the module's app, client and connections stay.
  let queueName = '';
  const publisher = new SqsPublisher({ client: clientConfig, queue: () => queueName });
  const app = await startOutboxApp({
    dataSource: pg,
    tableName: TABLE,
    publisher,
    autoStart: false,
    instanceId: 'bench-p1-sqs',
    ordering: { enabled: true },
  });
  try {
    // Warm-up of both paths.
    let q = await freshQueue(sqs, 'bench-p1-sqs-warm');
    queues.push(q.url);
    queueName = q.name;
    await prepare(2_000);
    await drainAll(app, pg, TABLE);
    await bareSend(sqs, q.url, bareEntries(2_000));

    for (let run = 1; run <= ctx.runs; run++) {
      const m = await measured(
        `P1-SQS run ${run} module`,
        ctx.log,
        async () => {
          // A queue of its own per attempt: a repeated attempt must not count the one before.
          q = await freshQueue(sqs, `bench-p1-sqs-module-${run}`);
          queues.push(q.url);
          queueName = q.name;
          await prepare(n);
          const { seconds, cpuUs } = await timedWithCpu(() => drainAll(app, pg, TABLE));
          moduleCpu.push(cpuUs / n);
          return { s: seconds, count: await depth(sqs, q.url) };
        },
        [app],
      );
      if (m.count !== n) wrongCount += 1;
      moduleRates.push(n / m.s);

      const bare = await freshQueue(sqs, `bench-p1-sqs-bare-${run}`);
      queues.push(bare.url);
      const entries = bareEntries(n);
      const b = await timedWithCpu(() => bareSend(sqs, bare.url, entries));
      bareCpu.push(b.cpuUs / n);
      bareRates.push(n / b.seconds);
      ctx.log(
        `P1-SQS run ${run}: module ${Math.round(n / m.s)} msgs/s (queue holds ${m.count}), bare client ${Math.round(n / b.seconds)} msgs/s`,
      );
    }
  } finally {
    await app.close();
    await Promise.all(
      queues.map((url) =>
        sqs.send(new DeleteQueueCommand({ QueueUrl: url })).catch(() => undefined),
      ),
    );
  }

  const module = addMetric(
    result,
    'module_msgs_per_s',
    'SqsPublisher drain (module)',
    'msgs/s',
    moduleRates,
    n,
  );
  const bare = addMetric(
    result,
    'bare_client_msgs_per_s',
    `bare SQS client: SendMessageBatch of 10, ${CONCURRENCY} calls in flight, no database`,
    'msgs/s',
    bareRates,
    n,
  );
  addMetric(result, 'module_cpu_us_per_msg', 'module: Node CPU per message', 'µs', moduleCpu);
  addMetric(result, 'bare_cpu_us_per_msg', 'bare client: Node CPU per message', 'µs', bareCpu);
  const share = ratio(module.median, bare.median);
  result.values.module_vs_bare_client = round(share, 2);
  addTarget(result, 'module_vs_bare_client', 'module ÷ bare SQS client (median)', share, '>=', 0.8);
  if (wrongCount > 0) {
    result.notes.push(
      `${wrongCount} module run(s) left the queue holding other than ${n} messages`,
    );
  }
  return result;
}
