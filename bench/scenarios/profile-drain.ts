/**
 * `npm run bench -- --profile [rabbitmq|kafka]`: the module's P1 drain (PostgreSQL → RabbitMQ)
 * or its P2 drain (PostgreSQL → Kafka), ordering on, 1 000 keys, in a dispatcher process run
 * under `node --cpu-prof`, with wall time split into claim / publish / settle (timed around the
 * store and the publisher), server-side statement times from pg_stat_statements when it is
 * preloaded, and the CPU profile of the drain window summarised by category and by function.
 * Beside it, the bare relays drain the same backlog in this process (RabbitMQ: with the module's
 * message properties and with their own; Kafka: on an idempotent producer like KafkaPublisher's
 * and on a plain one): per message, the node CPU, PostgreSQL execution time and statements of
 * each, so the remaining gap can be placed. Records the figures in bench/results/summary.json
 * (`cpuProfile`, `cpuProfileKafka`) and renders them as profile.md or profile-kafka.md; the
 * .cpuprofile (open it in Chrome DevTools) stays in bench/results/profile/ or profile-kafka/.
 */
import { named } from '../support/config';
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Producer } from 'kafkajs';
import {
  BARE_BATCH_SIZE,
  bareKafkaRelay,
  bareRabbitRelay,
  type BareProperties,
} from '../baselines/bare-relay';
import { cpuBetween, readCpu, type CpuReading } from '../support/system-cpu';
import { forkTs } from '../support/child';
import { summariseProfile } from '../support/cpu-profile';
import {
  analyse,
  dropOutboxTable,
  pgPool,
  resetOutboxTable,
  seedOutbox,
  truncateOutbox,
} from '../support/databases';
import type { DispatcherChildConfig } from '../support/dispatcher-process';
import { bareProducer, deleteTopic, ensureKafka, resetTopic } from '../support/kafka';
import { kafkaWarmupTopic, type PhaseTimes } from '../support/outbox-app';
import type { Pool } from '../support/pg';
import { ConfirmLink, purgeQueue, resetQueue } from '../support/rabbit';
import type { DataSource } from 'typeorm';
import { updateSummary, type BenchContext } from '../support/report';
import { percentile, round } from '../support/stats';

/** The broker a profile drains to. */
export type ProfiledBroker = 'rabbitmq' | 'kafka';

const TABLE = named('bench_profile');
const QUEUE = named('bench.profile', '.');
const TOPIC = named('bench-profile', '-');

interface ServerStatement {
  query: string;
  calls: number;
  total_ms: number;
  mean_ms: number;
}

/** What one drain cost, per message: node CPU, PostgreSQL execution time, statements. */
interface DrainCost {
  readonly name: string;
  readonly msgsPerS: number;
  readonly nodeCpuUsPerMsg: number;
  /** null without pg_stat_statements. */
  readonly serverUsPerMsg: number | null;
  /**
   * CPU time of every PostgreSQL process over the drain (/proc), per message: unlike the
   * execution time, it counts parsing, planning and the protocol too. null without /proc.
   */
  readonly serverCpuUsPerMsg: number | null;
  readonly statementsPerBatch: number | null;
}

/** PostgreSQL's CPU per message between two readings; null where /proc cannot be read. */
function postgresCpuPerMessage(
  start: CpuReading | undefined,
  end: CpuReading | undefined,
  messages: number,
): number | null {
  if (start === undefined || end === undefined) return null;
  return round((cpuBetween(start, end).servicesUs.postgres ?? 0) / messages, 1);
}

/** Every statement pg_stat_statements saw since its last reset, heaviest first. */
async function serverStatementsOf(pg: DataSource): Promise<ServerStatement[]> {
  return pg.query<ServerStatement[]>(
    `SELECT left(regexp_replace(s.query, '\\s+', ' ', 'g'), 70) AS query, s.calls::int AS calls, round(s.total_exec_time::numeric, 1)::float AS total_ms, round(s.mean_exec_time::numeric, 3)::float AS mean_ms
     FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
     WHERE d.datname = current_database() AND s.query NOT ILIKE '%pg_stat_statements%' ORDER BY s.total_exec_time DESC`,
  );
}

/** A bare relay's drain of the table, as one variant of the comparison. */
interface BareVariant {
  readonly name: string;
  drain(pool: Pool): Promise<unknown>;
}

/** What differs between the brokers: the destination, the bare relays, the names of the output. */
interface ProfiledTarget {
  /** The drain as the report names it, e.g. "PostgreSQL → Kafka (KafkaPublisher)". */
  readonly title: string;
  /** The scenario whose drain this is. */
  readonly scenario: 'P1' | 'P2';
  readonly summaryKey: `cpuProfile${string}`;
  readonly markdown: string;
  readonly directory: string;
  readonly child: Pick<DispatcherChildConfig, 'queue' | 'kafkaTopic'>;
  /** An empty destination, before a drain. */
  empty(): Promise<void>;
  /** The bare relays' variants, on connections opened here; `close` ends them. */
  bare(): Promise<{ variants: BareVariant[]; close(): Promise<void> }>;
  /** Removes the destination; with Kafka started for the profile, stops it. */
  end(): Promise<void>;
}

const RABBIT_VARIANTS: readonly { readonly properties: BareProperties; readonly name: string }[] = [
  { properties: 'outbox', name: "bare relay, the module's message properties" },
  { properties: 'bare', name: 'bare relay, its own properties' },
];

function rabbitTarget(ctx: BenchContext): ProfiledTarget {
  const { rabbit } = ctx;
  return {
    title: 'PostgreSQL → RabbitMQ (RabbitMqPublisher)',
    scenario: 'P1',
    summaryKey: 'cpuProfile',
    markdown: 'profile.md',
    directory: 'profile',
    child: { queue: QUEUE },
    empty: async () => {
      await resetQueue(rabbit, QUEUE, 10_000);
    },
    bare: () => {
      const link = new ConfirmLink(1_000);
      return Promise.resolve({
        variants: RABBIT_VARIANTS.map((variant) => ({
          name: variant.name,
          drain: async (pool) => {
            await purgeQueue(rabbit, QUEUE);
            const { window } = await link.get();
            return bareRabbitRelay({
              pool,
              table: TABLE,
              window,
              queue: QUEUE,
              properties: variant.properties,
            });
          },
        })),
        close: () => link.close(),
      });
    },
    end: async () => {
      await rabbit.deleteQueue(QUEUE);
    },
  };
}

/** Null when Kafka is not reachable and could not be started. */
async function kafkaTarget(ctx: BenchContext): Promise<ProfiledTarget | null> {
  const stop = await ensureKafka(ctx.log);
  if (stop === undefined) return null;
  await resetTopic(kafkaWarmupTopic(TOPIC));
  const variant = (name: string, producer: () => Producer): BareVariant => ({
    name,
    drain: async (pool) => {
      await resetTopic(TOPIC);
      return bareKafkaRelay({ pool, table: TABLE, producer: producer(), topic: TOPIC });
    },
  });
  return {
    title: 'PostgreSQL → Kafka (KafkaPublisher)',
    scenario: 'P2',
    summaryKey: 'cpuProfileKafka',
    markdown: 'profile-kafka.md',
    directory: 'profile-kafka',
    // The queue is unused when the child publishes to Kafka.
    child: { queue: QUEUE, kafkaTopic: TOPIC },
    empty: () => resetTopic(TOPIC),
    bare: async () => {
      const idempotent = await bareProducer(true);
      const plain = await bareProducer();
      return {
        variants: [
          variant(
            "bare relay, an idempotent producer (KafkaPublisher's settings)",
            () => idempotent,
          ),
          variant('bare relay, a plain producer', () => plain),
        ],
        close: async () => {
          await Promise.all([idempotent.disconnect(), plain.disconnect()]);
        },
      };
    },
    end: async () => {
      await deleteTopic(TOPIC);
      await deleteTopic(kafkaWarmupTopic(TOPIC));
      stop();
    },
  };
}

/** The bare relays' drains of `n` messages in this process, one per variant. */
async function bareCosts(
  ctx: BenchContext,
  target: ProfiledTarget,
  n: number,
  statements: boolean,
): Promise<DrainCost[]> {
  const { pg } = ctx;
  const pool = pgPool(4);
  const bare = await target.bare();
  const costs: DrainCost[] = [];
  try {
    for (const variant of bare.variants) {
      await truncateOutbox(pg, TABLE);
      await seedOutbox(pg, TABLE, n);
      await analyse(pg, TABLE);
      if (statements) await pg.query('SELECT pg_stat_statements_reset()');
      const cpu = process.cpuUsage();
      const serverCpu = readCpu();
      const started = performance.now();
      await variant.drain(pool);
      const seconds = (performance.now() - started) / 1000;
      const used = process.cpuUsage(cpu);
      const serverCpuEnd = readCpu();
      const server = statements ? await serverStatementsOf(pg) : [];
      const calls = server.reduce((a, st) => a + st.calls, 0);
      costs.push({
        name: variant.name,
        msgsPerS: Math.round(n / seconds),
        nodeCpuUsPerMsg: round((used.user + used.system) / n, 1),
        serverUsPerMsg: statements
          ? round((1000 * server.reduce((a, st) => a + st.total_ms, 0)) / n, 1)
          : null,
        statementsPerBatch: statements ? round(calls / Math.ceil(n / BARE_BATCH_SIZE), 1) : null,
        serverCpuUsPerMsg: postgresCpuPerMessage(serverCpu, serverCpuEnd, n),
      });
    }
  } finally {
    await bare.close();
    await pool.end();
  }
  return costs;
}

/**
 * How the profiled dispatcher shares the table (`--profile-claims`): the default leases,
 * `partitions`, or `stream` (partitions publishing with a window of 1 000). The latter two are
 * recorded and rendered apart (`cpuProfilePartitions`, profile-partitions.md, …).
 */
export type ProfiledClaims = 'leases' | 'partitions' | 'stream';

const CLAIMS_OPTIONS: Record<ProfiledClaims, DispatcherChildConfig['dispatcher']> = {
  leases: undefined,
  partitions: { claims: 'partitions' },
  stream: { claims: 'partitions', publishWindow: 1_000 },
};

export async function profileDrain(
  ctx: BenchContext,
  resultsDir: string,
  broker: ProfiledBroker = 'rabbitmq',
  claims: ProfiledClaims = 'leases',
): Promise<void> {
  const { pg } = ctx;
  const base = broker === 'kafka' ? await kafkaTarget(ctx) : rabbitTarget(ctx);
  if (base === null) {
    throw new Error('Kafka is not reachable and could not be started: `npm run kafka:start`');
  }
  const suffix = claims === 'leases' ? '' : claims;
  const target: ProfiledTarget =
    suffix === ''
      ? base
      : {
          ...base,
          title: `${base.title}, dispatcher ${JSON.stringify(CLAIMS_OPTIONS[claims])}`,
          summaryKey: `${base.summaryKey}${suffix[0]?.toUpperCase() ?? ''}${suffix.slice(1)}`,
          markdown: base.markdown.replace('.md', `-${suffix}.md`),
          directory: `${base.directory}-${suffix}`,
          empty: () => base.empty(),
          bare: () => base.bare(),
          end: () => base.end(),
        };
  const n = target.scenario === 'P1' ? ctx.profile.p1Messages : ctx.profile.p2Messages;
  const dir = join(resultsDir, target.directory);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  let done;
  let serverCpu: [CpuReading | undefined, CpuReading | undefined] = [undefined, undefined];
  let allServer: ServerStatement[] = [];
  let bare: DrainCost[];
  const statements = ctx.pgSettings.statStatements;
  try {
    await resetOutboxTable(pg, TABLE);
    await target.empty();
    await seedOutbox(pg, TABLE, n);
    await analyse(pg, TABLE);
    if (statements) {
      await pg.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    }
    const child = forkTs(
      '../support/dispatcher-process.ts',
      {
        mode: 'drain',
        table: TABLE,
        ...target.child,
        instanceId: 'bench-profile',
        phases: true,
        ...(CLAIMS_OPTIONS[claims] === undefined ? {} : { dispatcher: CLAIMS_OPTIONS[claims] }),
      } satisfies DispatcherChildConfig,
      [
        '--cpu-prof',
        '--cpu-prof-dir',
        dir,
        '--cpu-prof-name',
        `${target.scenario.toLowerCase()}-drain.cpuprofile`,
      ],
    );
    try {
      await child.next('ready', 60_000);
      if (statements) await pg.query('SELECT pg_stat_statements_reset()');
      const before = readCpu();
      child.send({ type: 'go' });
      done = await child.next('done');
      serverCpu = [before, readCpu()];
    } finally {
      child.send({ type: 'exit' });
      await child.exit();
    }
    // Every statement of the drain, all shown: the statements per batch are their calls, so the
    // reader can tell the dispatcher's own from the timed ones (unlocker, cleaner) that a longer
    // drain runs more often.
    allServer = statements ? await serverStatementsOf(pg) : [];
    bare = await bareCosts(ctx, target, n, statements);
  } finally {
    await dropOutboxTable(pg, TABLE);
    await target.end();
  }
  const serverStatements = allServer;

  const wallMs = Number(done.finishedAt) - Number(done.startedAt);
  const phases = done.phases as PhaseTimes;
  const sum = (a: number[]): number => a.reduce((x, y) => x + y, 0);
  const p50 = (a: number[]): number =>
    percentile(
      [...a].sort((x, y) => x - y),
      50,
    );
  const claim = sum(phases.claimMs);
  const publish = sum(phases.publishMs);
  const settle = sum(phases.settleMs);
  const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
  const cpu =
    file === undefined
      ? undefined
      : summariseProfile(join(dir, file), Number(done.hrStartUs), Number(done.hrEndUs));
  const serverMs = allServer.reduce((a, s) => a + s.total_ms, 0);
  const costs: DrainCost[] = [
    {
      name: 'nestjs-outbox (defaults)',
      msgsPerS: Math.round(n / (wallMs / 1000)),
      nodeCpuUsPerMsg: round((1000 * Number(done.cpuMs)) / n, 1),
      serverUsPerMsg: statements
        ? round((1000 * allServer.reduce((a, st) => a + st.total_ms, 0)) / n, 1)
        : null,
      statementsPerBatch: statements
        ? round(allServer.reduce((a, st) => a + st.calls, 0) / phases.claimMs.length, 1)
        : null,
      serverCpuUsPerMsg: postgresCpuPerMessage(...serverCpu, n),
    },
    ...bare,
  ];
  const summary = {
    messages: n,
    wallMs: round(wallMs, 1),
    msgsPerS: Math.round(n / (wallMs / 1000)),
    cpuMs: round(Number(done.cpuMs), 1),
    batches: phases.claimMs.length,
    wallSplit: {
      claimMs: round(claim, 1),
      claimPct: round((100 * claim) / wallMs, 1),
      publishMs: round(publish, 1),
      publishPct: round((100 * publish) / wallMs, 1),
      settleMs: round(settle, 1),
      settlePct: round((100 * settle) / wallMs, 1),
      /** Phase time ÷ wall time: above 1 when batches overlap (dispatcher.batchesInFlight > 1). */
      overlap: round((claim + publish + settle) / wallMs, 2),
      claimP50Ms: round(p50(phases.claimMs), 2),
      /** Claim p50 per quarter of the drain: does the claim slow down as delivered rows pile up? */
      claimP50ByQuarterMs: [0, 1, 2, 3].map((q) => {
        const per = Math.ceil(phases.claimMs.length / 4);
        return round(p50(phases.claimMs.slice(q * per, (q + 1) * per)), 2);
      }),
      publishP50Ms: round(p50(phases.publishMs), 2),
      settleP50Ms: round(p50(phases.settleMs), 2),
    },
    serverStatements,
    serverExecMs: round(serverMs, 1),
    perMessage: costs,
    cpu,
    profileFile: file === undefined ? null : `bench/results/${target.directory}/${file}`,
  };
  updateSummary(resultsDir, (results) => {
    results[target.summaryKey] = summary;
  });
  const md = [
    `# CPU profile of the module's ${target.scenario} drain`,
    '',
    `${n.toLocaleString('en-US')} messages ${target.title}, ordering on, 1 000 keys, default batch size; one dispatcher process under \`node --cpu-prof\`.`,
    '',
    `- Drain: ${summary.wallMs} ms wall, ${summary.msgsPerS} msgs/s, ${summary.batches} batches; process CPU ${summary.cpuMs} ms (${round((100 * summary.cpuMs) / wallMs, 1)} % of wall).`,
    `- Wall split: claim ${summary.wallSplit.claimPct} % (p50 ${summary.wallSplit.claimP50Ms} ms; by quarter of the drain ${summary.wallSplit.claimP50ByQuarterMs.join(' / ')} ms), publish ${summary.wallSplit.publishPct} % (p50 ${summary.wallSplit.publishP50Ms} ms), settle ${summary.wallSplit.settlePct} % (p50 ${summary.wallSplit.settleP50Ms} ms) of the wall time; phases overlap ${summary.wallSplit.overlap}× (batches in flight).`,
    statements
      ? `- Server-side execution (pg_stat_statements): ${summary.serverExecMs} ms in total.`
      : '- pg_stat_statements not preloaded: no server-side split.',
    ...(cpu === undefined
      ? []
      : [
          `- Event-loop thread busy ${cpu.busyPct} % of the drain window (idle ${cpu.idleMs} ms, GC ${cpu.gcMs} ms).`,
        ]),
    '',
    "Each drain below starts from the same backlog. The module's node CPU is its dispatcher process's, run under the profiler (which adds to it); the bare relays' is this process's, unprofiled. PostgreSQL execution is pg_stat_statements' total over the drain; PostgreSQL CPU is what every PostgreSQL process used over the drain (/proc), parsing, planning and the protocol included.",
    '',
    '| drain (same backlog) | msgs/s | node CPU µs/msg | PostgreSQL execution µs/msg | PostgreSQL CPU µs/msg | statements per batch |',
    '|---|---:|---:|---:|---:|---:|',
    ...costs.map(
      (c) =>
        `| ${c.name} | ${c.msgsPerS} | ${c.nodeCpuUsPerMsg} | ${c.serverUsPerMsg ?? 'n/a'} | ${c.serverCpuUsPerMsg ?? 'n/a'} | ${c.statementsPerBatch ?? 'n/a'} |`,
    ),
    '',
    ...(serverStatements.length > 0
      ? [
          '| statement | calls | total ms | mean ms |',
          '|---|---:|---:|---:|',
          ...serverStatements.map(
            (s) =>
              `| \`${s.query.replace(/\|/g, '\\|')}\` | ${s.calls} | ${s.total_ms} | ${s.mean_ms} |`,
          ),
          '',
        ]
      : []),
    ...(cpu === undefined
      ? []
      : [
          '| category | self ms | % of window |',
          '|---|---:|---:|',
          ...cpu.byCategory.map((c) => `| ${c.name} | ${c.ms} | ${c.pct} |`),
          '',
          '| function | where | category | self ms | % |',
          '|---|---|---|---:|---:|',
          ...cpu.topSelf.map(
            (f) => `| \`${f.fn}\` | ${f.where} | ${f.category} | ${f.ms} | ${f.pct} |`,
          ),
        ]),
    '',
  ].join('\n');
  writeFileSync(join(resultsDir, target.markdown), md);
  console.log(`\n${md}`);
  ctx.log(
    `recorded ${target.summaryKey} in bench/results/summary.json, wrote ${target.markdown} and the .cpuprofile`,
  );
}
