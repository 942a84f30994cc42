/**
 * J1: drain a backlog PostgreSQL → NATS JetStream (`JetStreamPublisher`, a PubAck per message),
 * one dispatcher, ordering on, 1 000 keys, 1 KiB JSON: P1's drain on another broker. Beside it
 * the broker client's own ceiling: the same `@nats-io/jetstream` client publishing the same
 * messages with the same headers, pipelined with as many PubAcks outstanding as the dispatcher
 * has (two batches of 500), and no database. The ratio is what the outbox (claim, lease, settle
 * and the publisher's bookkeeping) leaves of what the client can do. Each run is checked in the
 * stream: as many messages as the backlog (none missing; a copy would be dropped by the
 * duplicate window and counted as a duplicate PubAck instead).
 */
import { JetStreamPublisher } from '../../lib/publishers/jetstream';
import { named } from '../support/config';
import {
  analyse,
  dropOutboxTable,
  resetOutboxTable,
  seedOutbox,
  truncateOutbox,
} from '../support/databases';
import { bareJetStreamPublish, NATS_URL, openBenchStream } from '../support/jetstream';
import { drainAll, instrument, measured, startOutboxApp } from '../support/outbox-app';
import { timedWithCpu } from '../support/node-cpu';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { canConnect, SERVICES as TEST_SERVICES } from '../../test/support/services';
import { percentile, ratio } from '../support/stats';

const TABLE = named('bench_j1');

const median = (xs: readonly number[]): number =>
  percentile(
    [...xs].sort((a, b) => a - b),
    50,
  );

export async function j1(ctx: BenchContext): Promise<ScenarioResult> {
  const n = ctx.profile.p1Messages;
  const result = newResult(
    'J1',
    `Drain PostgreSQL → NATS JetStream (JetStreamPublisher, PubAck per message), ordering on, 1 000 keys (${n.toLocaleString('en-US')} msgs)`,
  );
  if (!(await canConnect(TEST_SERVICES.nats.host, TEST_SERVICES.nats.port))) {
    result.skipped.push(`NATS is not reachable at ${NATS_URL}: start nats-server with -js`);
    return result;
  }
  const { pg } = ctx;
  await resetOutboxTable(pg, TABLE);
  const stream = await openBenchStream(named('bench_j1'));
  const publisher = new JetStreamPublisher({
    servers: NATS_URL,
    name: 'outbox-bench',
    subject: () => stream.subject,
  });
  const app = await startOutboxApp({
    dataSource: pg,
    tableName: TABLE,
    publisher,
    autoStart: false,
    instanceId: 'bench-j1',
    ordering: { enabled: true },
  });
  const phases = instrument(app.store, publisher);
  const moduleRates: number[] = [];
  const bareRates: number[] = [];
  const moduleCpu: number[] = [];
  const bareCpu: number[] = [];
  const publishMs: number[] = [];
  const claimMs: number[] = [];
  const settleMs: number[] = [];
  let missing = 0;
  const prepare = async (count: number): Promise<void> => {
    await truncateOutbox(pg, TABLE);
    await seedOutbox(pg, TABLE, count);
    await analyse(pg, TABLE);
  };
  try {
    // Warm-up: connections, statement plans, the JIT.
    await prepare(2_000);
    await drainAll(app, pg, TABLE);
    await bareJetStreamPublish(stream.subject, 2_000);

    for (let run = 1; run <= ctx.runs; run++) {
      const m = await measured(
        `J1 run ${run} module`,
        ctx.log,
        async () => {
          await stream.purge();
          await prepare(n);
          for (const times of Object.values(phases)) times.length = 0;
          const { seconds, cpuUs } = await timedWithCpu(() => drainAll(app, pg, TABLE));
          moduleCpu.push(cpuUs / n);
          return { s: seconds, count: await stream.count() };
        },
        [app],
      );
      moduleRates.push(n / m.s);
      publishMs.push(median(phases.publishMs));
      claimMs.push(median(phases.claimMs));
      settleMs.push(median(phases.settleMs));
      if (m.count < n) missing += n - m.count;
      ctx.log(`J1 run ${run}: module ${Math.round(n / m.s)} msgs/s (stream holds ${m.count})`);

      const b = await measured(`J1 run ${run} bare client`, ctx.log, async () => {
        await stream.purge();
        let stored = 0;
        const { seconds, cpuUs } = await timedWithCpu(async () => {
          stored = await bareJetStreamPublish(stream.subject, n);
        });
        bareCpu.push(cpuUs / n);
        if (stored !== n) throw new Error(`the bare client stored ${stored} of ${n}`);
        return seconds;
      });
      bareRates.push(n / b);
      ctx.log(`J1 run ${run}: bare @nats-io/jetstream client ${Math.round(n / b)} msgs/s`);
    }
  } finally {
    await app.close();
    await stream.close();
    await dropOutboxTable(pg, TABLE);
  }
  const module = addMetric(
    result,
    'module_msgs_per_s',
    'nestjs-outbox (JetStreamPublisher, PostgreSQL, ordering on)',
    'msgs/s',
    moduleRates,
    n,
  );
  const bare = addMetric(
    result,
    'bare_jetstream_msgs_per_s',
    'bare @nats-io/jetstream client, same messages and headers, 1 000 PubAcks outstanding, no database',
    'msgs/s',
    bareRates,
    n,
  );
  addTarget(
    result,
    'j1_vs_bare_client',
    'module ÷ the bare JetStream client (its own ceiling)',
    ratio(module.median, bare.median),
    '>=',
    0.8,
  );
  for (const [key, label, runs] of [
    ['module', 'nestjs-outbox', moduleCpu],
    ['bare', 'bare client', bareCpu],
  ] as const) {
    addMetric(
      result,
      `${key}_node_cpu_us_per_msg`,
      `node CPU per message in the bench's process: ${label}`,
      'µs',
      runs,
      n,
    );
  }
  for (const [key, label, runs] of [
    ['claim', 'claim', claimMs],
    ['publish', 'publish (JetStreamPublisher, PubAcks awaited)', publishMs],
    ['settle', 'settle', settleMs],
  ] as const) {
    addMetric(
      result,
      `module_${key}_ms`,
      `nestjs-outbox, median wall time of one batch's ${label}`,
      'ms',
      runs,
    );
  }
  addTarget(result, 'j1_missing_messages', 'messages missing from the stream', missing, '==', 0);
  return result;
}
