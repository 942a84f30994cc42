/**
 * P1: drain a backlog PostgreSQL → RabbitMQ with one dispatcher, ordering on, 1 000 keys, with
 * RabbitMqPublisher's defaults and with `outboxHeaders: false`; beside it, on the same table
 * shape, queue and services: the bare pipelined relay (with its own message properties, with the
 * module's, and with parts of those), the naive relay and pg-transactional-outbox (README
 * configuration and fastest configuration). Both settle modes: the module marking delivered rows
 * (the default) and deleting them (`deliveredRetentionMs: 0`), each against the bare relay that
 * settles the same way. The module's runs are checked at the consumer (duplicates, per-key order,
 * missing messages).
 */
import { named } from '../support/config';
import { bareRabbitRelay, type BareProperties } from '../baselines/bare-relay';
import { naiveRelay } from '../baselines/naive-relay';
import { PgtoBaseline, type PgtoMode, type PgtoRun } from '../baselines/pgto-relay';
import {
  analyse,
  dropOutboxTable,
  pgPool,
  resetOutboxTable,
  seedOutbox,
  truncateOutbox,
} from '../support/databases';
import { drainAll, measured, rabbitPublisher, startOutboxApp } from '../support/outbox-app';
import { ConfirmLink, purgeQueue, queueDepth, readAndCheck, resetQueue } from '../support/rabbit';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { CONFIGURE_HINT } from '../support/services';
import { timedWithCpu } from '../support/node-cpu';
import { ratio, round } from '../support/stats';

/** The window of the streaming variant: the bare relay's unconfirmed publishes. */
const STREAM_WINDOW = 1_000;
const TABLE = named('bench_p1');
/**
 * The streaming variant's own table: two `'partitions'` dispatchers on one table divide its
 * partitions between them, and one drained by hand would then drain only its share.
 */
const STREAM_TABLE = named('bench_p1_stream');

interface PropertyVariant {
  readonly properties: Exclude<BareProperties, 'bare'>;
  readonly metric: string;
  readonly label: string;
}

/**
 * The bare relay again with the module's message properties, then with two parts of them: what
 * the promises cost at the broker, apart from what the relay spends (see BareProperties).
 */
const PROPERTY_VARIANTS: readonly PropertyVariant[] = [
  {
    properties: 'outbox',
    metric: 'bare_outbox_properties_msgs_per_s',
    label: "the module's message properties (mandatory, ids, x-outbox-* headers)",
  },
  {
    properties: 'outbox-no-headers',
    metric: 'bare_outbox_no_headers_msgs_per_s',
    label: "the module's message properties without the headers",
  },
  {
    properties: 'bare-one-header',
    metric: 'bare_one_header_msgs_per_s',
    label: 'its own properties and one header (x-outbox-publish-id)',
  },
];
const QUEUE = named('bench.p1', '.');

export async function p1(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile, pg, rabbit, log } = ctx;
  const n = profile.p1Messages;
  const result = newResult(
    'P1',
    `Drain PostgreSQL → RabbitMQ, 1 dispatcher, ordering on, 1 000 keys, 1 KiB payloads (${n.toLocaleString('en-US')} msgs)`,
  );
  await resetOutboxTable(pg, TABLE);
  await resetOutboxTable(pg, STREAM_TABLE);
  await resetQueue(rabbit, QUEUE);

  const app = await startOutboxApp({
    dataSource: pg,
    tableName: TABLE,
    publisher: rabbitPublisher(QUEUE),
    autoStart: false,
    instanceId: 'bench-p1',
    ordering: { enabled: true },
  });
  // The same module sending without the x-outbox-* headers (RabbitMqPublisher's outboxHeaders:
  // false), to set beside the bare relay with the same properties.
  const noHeadersApp = await startOutboxApp({
    dataSource: pg,
    tableName: TABLE,
    publisher: rabbitPublisher(QUEUE, { outboxHeaders: false }),
    autoStart: false,
    instanceId: 'bench-p1-no-headers',
    ordering: { enabled: true },
  });
  // The default publisher, deleting delivered rows at settle: the other settle mode.
  const deleteApp = await startOutboxApp({
    dataSource: pg,
    tableName: TABLE,
    publisher: rabbitPublisher(QUEUE),
    autoStart: false,
    instanceId: 'bench-p1-delete',
    ordering: { enabled: true },
    cleaner: { deliveredRetentionMs: 0 },
  });
  // Partitioned delivery (dispatcher.claims 'partitions'): reads without leases, one write per
  // message at the settle (issue 69's core), beside the claim loop on the same table.
  const partitionsApp = await startOutboxApp({
    dataSource: pg,
    tableName: TABLE,
    publisher: rabbitPublisher(QUEUE),
    autoStart: false,
    instanceId: 'bench-p1-partitions',
    ordering: { enabled: true },
    dispatcher: { claims: 'partitions' },
  });
  // The same publishing as a stream (dispatcher.publishWindow, the bare relay's 1 000
  // unconfirmed): slices of 250 across batches, settles written together (issue 76, step 2).
  const streamApp = await startOutboxApp({
    dataSource: pg,
    tableName: STREAM_TABLE,
    publisher: rabbitPublisher(QUEUE),
    autoStart: false,
    instanceId: 'bench-p1-stream',
    ordering: { enabled: true },
    dispatcher: { claims: 'partitions', publishWindow: STREAM_WINDOW },
  });
  const pool = pgPool(4);
  const link = new ConfirmLink(1_000);
  const pgtoModes: PgtoMode[] = ctx.pgSettings.walLevel === 'logical' ? ['fast', 'readme'] : [];
  if (pgtoModes.length === 0) {
    result.skipped.push(
      `pg-transactional-outbox baseline: wal_level is ${ctx.pgSettings.walLevel}, not logical. ${CONFIGURE_HINT}`,
    );
  }

  const moduleRates: number[] = [];
  const noHeadersRates: number[] = [];
  const deleteRates: number[] = [];
  const partitionsRates: number[] = [];
  const streamRates: number[] = [];
  // The module's drains, each checked at the consumer.
  const moduleDrains = [
    { label: 'module', app, cpuKey: 'module', rates: moduleRates },
    {
      label: 'module without the x-outbox-* headers',
      app: noHeadersApp,
      cpuKey: 'module_no_headers',
      rates: noHeadersRates,
    },
    {
      label: 'module deleting delivered rows',
      app: deleteApp,
      cpuKey: 'module_delete',
      rates: deleteRates,
    },
    {
      label: "module with dispatcher.claims 'partitions'",
      app: partitionsApp,
      cpuKey: 'module_partitions',
      rates: partitionsRates,
    },
    {
      label: `module with 'partitions' and publishWindow ${STREAM_WINDOW}`,
      app: streamApp,
      table: STREAM_TABLE,
      cpuKey: 'module_stream',
      rates: streamRates,
    },
  ];
  const bareRates: number[] = [];
  const bareDeleteRates: number[] = [];
  const variantRates: Record<PropertyVariant['properties'], number[]> = {
    outbox: [],
    'outbox-no-headers': [],
    'bare-one-header': [],
  };
  const naiveRates: number[] = [];
  const pgtoRates: Record<PgtoMode, number[]> = { fast: [], readme: [] };
  const pgtoRuns: Record<PgtoMode, PgtoRun[]> = { fast: [], readme: [] };
  let duplicates = 0;
  let orderViolations = 0;
  let missing = 0;

  const prepare = async (count: number, table = TABLE): Promise<void> => {
    await truncateOutbox(pg, table);
    await seedOutbox(pg, table, count);
    await analyse(pg, table);
    await purgeQueue(rabbit, QUEUE);
  };
  // Node CPU per message of the drains run in this process (the module's dispatcher and the
  // bare relays), by the metric key it is recorded under.
  const cpuPerMsg = new Map<string, number[]>();
  const timed = async (fn: () => Promise<unknown>, cpuKey?: string): Promise<number> => {
    const { seconds, cpuUs } = await timedWithCpu(fn);
    if (cpuKey !== undefined) cpuPerMsg.set(cpuKey, [...(cpuPerMsg.get(cpuKey) ?? []), cpuUs / n]);
    return seconds;
  };
  const bare = async (
    properties: BareProperties = 'bare',
    settle: 'mark' | 'delete' = 'mark',
  ): Promise<number> => {
    const { window } = await link.get();
    return bareRabbitRelay({ pool, table: TABLE, window, queue: QUEUE, properties, settle });
  };
  const naive = async (): Promise<number> => {
    const { channel } = await link.get();
    return naiveRelay({ pool, table: TABLE, channel, queue: QUEUE });
  };

  try {
    // Warm-up (connections, JIT, plans); not measured.
    await measured('P1 warm-up', log, async () => {
      await prepare(2_000);
      await drainAll(app, pg, TABLE);
      await prepare(2_000);
      await drainAll(noHeadersApp, pg, TABLE);
      await prepare(2_000);
      await drainAll(deleteApp, pg, TABLE);
      await prepare(2_000);
      await drainAll(partitionsApp, pg, TABLE);
      await prepare(2_000, STREAM_TABLE);
      await drainAll(streamApp, pg, STREAM_TABLE);
      await prepare(2_000);
      await bare();
      await prepare(2_000);
      await bare('bare', 'delete');
    });

    for (let run = 1; run <= ctx.runs; run++) {
      for (const drain of moduleDrains) {
        const m = await measured(
          `P1 run ${run} ${drain.label}`,
          log,
          async () => {
            const table = drain.table ?? TABLE;
            await prepare(n, table);
            const s = await timed(() => drainAll(drain.app, pg, table), drain.cpuKey);
            return { s, check: await readAndCheck(QUEUE, n) };
          },
          [drain.app],
        );
        drain.rates.push(n / m.s);
        duplicates += m.check.duplicates;
        orderViolations += m.check.orderViolations;
        missing += m.check.missing;
        log(
          `P1 run ${run}: ${drain.label} ${Math.round(n / m.s)} msgs/s (received ${m.check.received}, dup ${m.check.duplicates}, order violations ${m.check.orderViolations}, missing ${m.check.missing})`,
        );
      }

      const b = await measured(`P1 run ${run} bare relay`, log, async () => {
        await prepare(n);
        return timed(bare, 'bare');
      });
      bareRates.push(n / b);
      log(
        `P1 run ${run}: bare relay ${Math.round(n / b)} msgs/s (queue holds ${await queueDepth(rabbit, QUEUE)})`,
      );

      const d = await measured(`P1 run ${run} bare relay deleting`, log, async () => {
        await prepare(n);
        return timed(() => bare('bare', 'delete'), 'bare_delete');
      });
      bareDeleteRates.push(n / d);
      log(`P1 run ${run}: bare relay deleting its rows ${Math.round(n / d)} msgs/s`);

      for (const variant of PROPERTY_VARIANTS) {
        const s = await measured(`P1 run ${run} bare relay, ${variant.label}`, log, async () => {
          await prepare(n);
          return timed(() => bare(variant.properties), variant.metric.replace(/_msgs_per_s$/, ''));
        });
        variantRates[variant.properties].push(n / s);
        log(`P1 run ${run}: bare relay, ${variant.label}: ${Math.round(n / s)} msgs/s`);
      }

      const nn = profile.naiveMessages;
      const v = await measured(`P1 run ${run} naive relay`, log, async () => {
        await prepare(nn);
        return timed(naive);
      });
      naiveRates.push(nn / v);
      log(`P1 run ${run}: naive relay ${Math.round(nn / v)} msgs/s`);
    }
  } finally {
    await app.close();
    await noHeadersApp.close();
    await deleteApp.close();
    await partitionsApp.close();
    await streamApp.close();
    await pool.end();
  }

  for (const mode of pgtoModes) {
    const baseline = new PgtoBaseline(mode, link, QUEUE);
    try {
      await baseline.setup();
      const count = mode === 'fast' ? profile.pgtoMessages : profile.pgtoReadmeMessages;
      for (let run = 1; run <= ctx.runs; run++) {
        const { r, check } = await measured(
          `P1 run ${run} pg-transactional-outbox (${mode})`,
          log,
          async () => {
            await purgeQueue(rabbit, QUEUE);
            const r = await baseline.drainBacklog(count, 5_000);
            return { r, check: await readAndCheck(QUEUE, count, { quietMs: 200 }) };
          },
        );
        pgtoRuns[mode].push({ ...r, unprocessed: Math.max(r.unprocessed, count - check.unique) });
        pgtoRates[mode].push(r.processed / r.seconds);
        log(
          `P1 run ${run}: pg-transactional-outbox (${mode}) ${Math.round(r.processed / r.seconds)} msgs/s, unpublished ${count - check.unique}/${count}${Object.keys(r.warnings).length > 0 ? `, warnings ${JSON.stringify(r.warnings)}` : ''}`,
        );
      }
      if (mode === 'fast') {
        // Loss under concurrency: the listener runs while 8 writers commit.
        const { r, check } = await measured('P1 pg-transactional-outbox live', log, async () => {
          await purgeQueue(rabbit, QUEUE);
          const r = await baseline.live(profile.pgtoMessages, 5_000);
          return { r, check: await readAndCheck(QUEUE, profile.pgtoMessages, { quietMs: 200 }) };
        });
        const lost = Math.max(r.unprocessed, profile.pgtoMessages - check.unique);
        result.values.pgto_live_committed = r.committed;
        result.values.pgto_live_lost = lost;
        result.values.pgto_live_lost_pct = round((100 * lost) / r.committed, 3);
        log(
          `P1: pg-transactional-outbox (fast) live with 8 writers: ${lost}/${r.committed} never published${Object.keys(r.warnings).length > 0 ? `, warnings ${JSON.stringify(r.warnings)}` : ''}`,
        );
      }
    } catch (error) {
      result.skipped.push(
        `pg-transactional-outbox (${mode}): ${error instanceof Error ? error.message : String(error)}`,
      );
    } finally {
      await baseline.teardown();
    }
  }
  await link.close();
  await dropOutboxTable(pg, TABLE);
  await dropOutboxTable(pg, STREAM_TABLE);
  await rabbit.deleteQueue(QUEUE);

  const module = addMetric(
    result,
    'module_msgs_per_s',
    'nestjs-outbox (RabbitMqPublisher, defaults)',
    'msgs/s',
    moduleRates,
    n,
  );
  const noHeaders = addMetric(
    result,
    'module_no_headers_msgs_per_s',
    'nestjs-outbox, RabbitMqPublisher with outboxHeaders: false',
    'msgs/s',
    noHeadersRates,
    n,
  );
  const partitionsS = addMetric(
    result,
    'module_partitions_msgs_per_s',
    "nestjs-outbox, dispatcher.claims 'partitions' (RabbitMqPublisher, defaults)",
    'msgs/s',
    partitionsRates,
    n,
  );
  const streamS = addMetric(
    result,
    'module_stream_msgs_per_s',
    `nestjs-outbox, 'partitions' with dispatcher.publishWindow ${STREAM_WINDOW} (RabbitMqPublisher)`,
    'msgs/s',
    streamRates,
    n,
  );
  const bareS = addMetric(
    result,
    'bare_msgs_per_s',
    'bare pipelined relay (claim 500, ≤1 000 confirms)',
    'msgs/s',
    bareRates,
    n,
  );
  const moduleDelete = addMetric(
    result,
    'module_delete_msgs_per_s',
    'nestjs-outbox deleting delivered rows (deliveredRetentionMs: 0)',
    'msgs/s',
    deleteRates,
    n,
  );
  const bareDelete = addMetric(
    result,
    'bare_delete_msgs_per_s',
    'bare pipelined relay deleting its rows at settle',
    'msgs/s',
    bareDeleteRates,
    n,
  );
  const [bareOutbox, bareNoHeaders, bareOneHeader] = PROPERTY_VARIANTS.map((variant) =>
    addMetric(
      result,
      variant.metric,
      `bare pipelined relay sending ${variant.label}`,
      'msgs/s',
      variantRates[variant.properties],
      n,
    ),
  );
  if (bareOutbox === undefined || bareNoHeaders === undefined || bareOneHeader === undefined)
    throw new Error('P1: a property variant was not measured');
  const naiveS = addMetric(
    result,
    'naive_msgs_per_s',
    'naive relay (select 100, publish+update each)',
    'msgs/s',
    naiveRates,
    profile.naiveMessages,
  );
  for (const [key, runs] of cpuPerMsg) {
    addMetric(
      result,
      `${key}_node_cpu_us_per_msg`,
      `node CPU per message of the drain in the bench's process: ${key.replace(/_/g, ' ')}`,
      'µs',
      runs,
      n,
    );
  }
  addTarget(
    result,
    'p1_vs_bare',
    'module ÷ bare relay',
    ratio(module.median, bareS.median),
    '>=',
    0.95,
  );
  addTarget(
    result,
    'p1_delete_vs_bare_delete',
    'module ÷ bare relay, both deleting delivered rows',
    ratio(moduleDelete.median, bareDelete.median),
    '>=',
    0.95,
  );
  addTarget(
    result,
    'p1_vs_bare_outbox_properties',
    "module ÷ bare relay sending the module's message properties (the relay's own cost)",
    ratio(module.median, bareOutbox.median),
    '>=',
    0.95,
  );
  // What the properties alone cost at the broker, with the relay the same.
  result.values.p1_bare_outbox_properties_vs_bare = round(
    ratio(bareOutbox.median, bareS.median),
    3,
  );
  // The headers' share of that: the same properties with and without them, and one header.
  result.values.p1_bare_outbox_no_headers_vs_bare = round(
    ratio(bareNoHeaders.median, bareS.median),
    3,
  );
  result.values.p1_bare_one_header_vs_bare = round(ratio(bareOneHeader.median, bareS.median), 3);
  // Without the headers: the module against the bare relay, and against the bare relay that sends
  // the same properties (the relay's own cost on that wire format).
  result.values.p1_no_headers_vs_bare = round(ratio(noHeaders.median, bareS.median), 3);
  addTarget(
    result,
    'p1_partitions_vs_bare',
    "drain with dispatcher.claims 'partitions' vs the bare relay (issue 69's target)",
    ratio(partitionsS.median, bareS.median),
    '>=',
    1.0,
  );
  result.values.p1_partitions_vs_leases = round(ratio(partitionsS.median, module.median), 3);
  addTarget(
    result,
    'p1_stream_vs_bare',
    `drain with 'partitions' and publishWindow ${STREAM_WINDOW} vs the bare relay (issue 76's target)`,
    ratio(streamS.median, bareS.median),
    '>=',
    1.0,
  );
  result.values.p1_stream_vs_partitions = round(ratio(streamS.median, partitionsS.median), 3);
  result.values.p1_no_headers_vs_bare_no_headers = round(
    ratio(noHeaders.median, bareNoHeaders.median),
    3,
  );
  addTarget(
    result,
    'p1_vs_naive',
    'module ÷ naive relay',
    ratio(module.median, naiveS.median),
    '>=',
    7,
  );
  if (pgtoRates.fast.length > 0) {
    const fast = addMetric(
      result,
      'pgto_fast_msgs_per_s',
      'pg-transactional-outbox, replication, 10 handlers',
      'msgs/s',
      pgtoRates.fast,
      profile.pgtoMessages,
    );
    addTarget(
      result,
      'p1_vs_pgto',
      'module ÷ pg-transactional-outbox (fastest)',
      ratio(module.median, fast.median),
      '>=',
      8,
    );
    const lost = pgtoRuns.fast.reduce((a, r) => a + r.unprocessed, 0);
    const committed = pgtoRuns.fast.reduce((a, r) => a + r.committed, 0);
    result.values.pgto_fast_backlog_lost = lost;
    result.values.pgto_fast_backlog_lost_pct = round((100 * lost) / committed, 3);
  }
  if (pgtoRates.readme.length > 0) {
    const readme = addMetric(
      result,
      'pgto_readme_msgs_per_s',
      'pg-transactional-outbox, README config (sequential)',
      'msgs/s',
      pgtoRates.readme,
      profile.pgtoReadmeMessages,
    );
    result.values.p1_vs_pgto_readme = round(ratio(module.median, readme.median), 3);
    const lost = pgtoRuns.readme.reduce((a, r) => a + r.unprocessed, 0);
    const committed = pgtoRuns.readme.reduce((a, r) => a + r.committed, 0);
    result.values.pgto_readme_backlog_lost = lost;
    result.values.pgto_readme_backlog_lost_pct = round((100 * lost) / committed, 3);
  }
  addTarget(
    result,
    'p1_duplicates',
    'duplicates at the consumer (module, both wire formats and settle modes, all runs)',
    duplicates,
    '==',
    0,
  );
  addTarget(
    result,
    'p1_order_violations',
    'per-key order violations (module, both wire formats and settle modes, all runs)',
    orderViolations,
    '==',
    0,
  );
  addTarget(
    result,
    'p1_missing',
    'messages missing at the consumer (module, both wire formats and settle modes)',
    missing,
    '==',
    0,
  );
  return result;
}
