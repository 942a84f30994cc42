/**
 * `npm run bench -- --profile`: the module's P1 drain (PostgreSQL → RabbitMQ, ordering on,
 * 1 000 keys) in a dispatcher process run under `node --cpu-prof`, with wall time split into
 * claim / publish / settle (timed around the store and the publisher), server-side statement
 * times from pg_stat_statements when it is preloaded, and the CPU profile of the drain window
 * summarised by category and by function. Beside it, the bare relay drains the same backlog in
 * this process, with the module's message properties and with its own: per message, the node
 * CPU, PostgreSQL execution time and statements of each, so the remaining gap can be placed.
 * Records the figures in bench/results/summary.json
 * (`cpuProfile`) and renders them as profile.md;
 * the .cpuprofile (open it in Chrome DevTools) stays in bench/results/profile/.
 */
import { named } from '../support/config';
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BARE_BATCH_SIZE, bareRabbitRelay, type BareProperties } from '../baselines/bare-relay';
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
import type { PhaseTimes } from '../support/outbox-app';
import { ConfirmLink, purgeQueue, resetQueue } from '../support/rabbit';
import type { DataSource } from 'typeorm';
import { updateSummary, type BenchContext } from '../support/report';
import { percentile, round } from '../support/stats';

const TABLE = named('bench_profile');
const QUEUE = named('bench.profile', '.');

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

const BARE_VARIANTS: readonly { readonly properties: BareProperties; readonly name: string }[] = [
  { properties: 'outbox', name: "bare relay, the module's message properties" },
  { properties: 'bare', name: 'bare relay, its own properties' },
];

/** The bare relay's drains of `n` messages in this process, one per variant. */
async function bareCosts(ctx: BenchContext, n: number, statements: boolean): Promise<DrainCost[]> {
  const { pg, rabbit } = ctx;
  const pool = pgPool(4);
  const link = new ConfirmLink(1_000);
  const costs: DrainCost[] = [];
  try {
    for (const variant of BARE_VARIANTS) {
      await truncateOutbox(pg, TABLE);
      await seedOutbox(pg, TABLE, n);
      await analyse(pg, TABLE);
      await purgeQueue(rabbit, QUEUE);
      const { window } = await link.get();
      if (statements) await pg.query('SELECT pg_stat_statements_reset()');
      const cpu = process.cpuUsage();
      const serverCpu = readCpu();
      const started = performance.now();
      await bareRabbitRelay({
        pool,
        table: TABLE,
        window,
        queue: QUEUE,
        properties: variant.properties,
      });
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
    await link.close();
    await pool.end();
  }
  return costs;
}

export async function profileDrain(ctx: BenchContext, resultsDir: string): Promise<void> {
  const { pg, rabbit } = ctx;
  const n = ctx.profile.p1Messages;
  const dir = join(resultsDir, 'profile');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  await resetOutboxTable(pg, TABLE);
  await resetQueue(rabbit, QUEUE, 10_000);
  await seedOutbox(pg, TABLE, n);
  await analyse(pg, TABLE);
  const statements = ctx.pgSettings.statStatements;
  if (statements) {
    await pg.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  }
  const child = forkTs(
    '../support/dispatcher-process.ts',
    {
      mode: 'drain',
      table: TABLE,
      queue: QUEUE,
      instanceId: 'bench-profile',
      phases: true,
    } satisfies DispatcherChildConfig,
    ['--cpu-prof', '--cpu-prof-dir', dir, '--cpu-prof-name', 'p1-drain.cpuprofile'],
  );
  let done;
  let serverCpu: [CpuReading | undefined, CpuReading | undefined] = [undefined, undefined];
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
  const allServer = statements ? await serverStatementsOf(pg) : [];
  const serverStatements = allServer;
  const bare = await bareCosts(ctx, n, statements);
  await dropOutboxTable(pg, TABLE);
  await rabbit.deleteQueue(QUEUE);

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
    profileFile: file === undefined ? null : `bench/results/profile/${file}`,
  };
  updateSummary(resultsDir, (results) => {
    results.cpuProfile = summary;
  });
  const md = [
    `# CPU profile of the module's P1 drain`,
    '',
    `${n.toLocaleString('en-US')} messages PostgreSQL → RabbitMQ (RabbitMqPublisher), ordering on, 1 000 keys, default batch size; one dispatcher process under \`node --cpu-prof\`.`,
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
    "Each drain below starts from the same backlog. The module's node CPU is its dispatcher process's, run under the profiler (which adds to it); the bare relay's is this process's, unprofiled. PostgreSQL execution is pg_stat_statements' total over the drain; PostgreSQL CPU is what every PostgreSQL process used over the drain (/proc), parsing, planning and the protocol included.",
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
  writeFileSync(join(resultsDir, 'profile.md'), md);
  console.log(`\n${md}`);
  ctx.log(
    'recorded cpuProfile in bench/results/summary.json, wrote profile.md and the .cpuprofile',
  );
}
