/**
 * `npm run bench`: the performance scenarios P1–P8 of issue 5 (and P9 of issue 8) against the local services.
 *
 *   npm run bench                          quick profile (scaled-down sizes, 3 runs each; about 14 min)
 *   npm run bench -- --full                the issue's sizes, 5 runs each
 *   npm run bench -- --only P1,P4          some scenarios
 *   npm run bench -- --only C1             the console over 10 000 000 rows (only when named)
 *   npm run bench -- --only T1 --runs 8    takeover after a SIGKILL, 8 kills per database
 *   npm run bench -- --only T2             the takeover look's cost (PostgreSQL)
 *   npm run bench -- --only P9P            a held key's backlog in 'partitions' mode (issue 75)
 *   npm run bench -- --only T3             'partitions' lapses on a loaded host per partitionTimeoutMs
 *   npm run bench -- --only P26            the optional schema steps on a live 500 000-row table, blocking vs --online
 *   npm run bench -- --runs 5              override the repetitions
 *   npm run bench -- --profile             CPU profile of the module's P1 drain (node --cpu-prof)
 *   npm run bench -- --profile kafka       the same of its P2 drain (PostgreSQL → Kafka)
 *   npm run bench -- --profile --profile-claims stream   the same with 'partitions' (and a window)
 *   npm run bench -- --wait-quiet 20       first wait (up to 20 min) until no jest process runs
 *   npm run bench -- --configure-postgres  wal_level=logical (+ pg_stat_statements) and restart PostgreSQL
 *
 * Records every scenario's figures in bench/results/summary.json (the latest per profile and
 * scenario) and, after a complete run, draws bench/results/throughput.svg.
 */
import 'reflect-metadata';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { renderChart } from './support/chart';
import { PROFILES, ISSUE_SIZES, resultsKey, type BenchProfile } from './support/config';
import {
  closeDataSource,
  dropStaleRunObjects,
  ensureMariaDatabase,
  ensurePgDatabase,
  openMaria,
  openPostgres,
} from './support/databases';
import { openRabbit } from './support/rabbit';
import {
  SUMMARY_FILE,
  recordScenarios,
  renderTable,
  scenarioJson,
  type BenchContext,
  type ScenarioResult,
} from './support/report';
import {
  CONFIGURE_HINT,
  configurePostgres,
  kafkaVersion,
  libraryRevision,
  machine,
  otherJestProcesses,
  pgSettings,
} from './support/services';
import { p1 } from './scenarios/p1-drain-rabbitmq';
import { p2 } from './scenarios/p2-drain-kafka';
import { p3 } from './scenarios/p3-other-databases';
import { p4 } from './scenarios/p4-latency';
import { p5 } from './scenarios/p5-enqueue-overhead';
import { p6, p6p } from './scenarios/p6-scale-out';
import { p7 } from './scenarios/p7-history';
import { p8 } from './scenarios/p8-idle-rss';
import { p9 } from './scenarios/p9-blocked-backlog';
import { p9p } from './scenarios/p9p-held-key-partitions';
import { p10 } from './scenarios/p10-cleanup';
import { p11 } from './scenarios/p11-partition-drop';
import { p12 } from './scenarios/p12-partitioned-enqueue';
import { p13 } from './scenarios/p13-mariadb-settings';
import { p14 } from './scenarios/p14-dispatcher-settings';
import { p15 } from './scenarios/p15-statement-buffers';
import { p16 } from './scenarios/p16-hot-keys';
import { p17 } from './scenarios/p17-large-payload';
import { p18 } from './scenarios/p18-external-delivery-enqueue';
import { p19 } from './scenarios/p19-debezium-drain';
import { p20 } from './scenarios/p20-drain-redis-streams';
import { p21 } from './scenarios/p21-sequence-enqueue';
import { p22 } from './scenarios/p22-tenant-fairness';
import { p23 } from './scenarios/p23-claim-check';
import { g1 } from './scenarios/g1-gap-repair';
import { p24 } from './scenarios/p24-cloud-events';
import { p24Sqs } from './scenarios/p24-cloud-events-sqs';
import { p25 } from './scenarios/p25-erasure';
import { p26 } from './scenarios/p26-online-migration';
import { p1Sqs } from './scenarios/p1-drain-sqs';
import { profileDrain, type ProfiledBroker, type ProfiledClaims } from './scenarios/profile-drain';
import { c1 } from './scenarios/c1-console-10m';
import { j1 } from './scenarios/j1-drain-jetstream';
import { l1 } from './scenarios/l1-log-drain';
import { l2 } from './scenarios/l2-log-latency';
import { l3 } from './scenarios/l3-log-writers';
import { l4 } from './scenarios/l4-log-bytes';
import { t1 } from './scenarios/t1-takeover';
import { t2 } from './scenarios/t2-takeover-look';
import { t3 } from './scenarios/t3-partition-lapses';
import { sleep } from '../test/support/wait-for';

const SCENARIOS: Record<string, (ctx: BenchContext) => Promise<ScenarioResult>> = {
  P1: p1,
  P2: p2,
  P3: p3,
  P4: p4,
  P5: p5,
  P6: p6,
  P6P: p6p,
  P7: p7,
  P8: p8,
  P9: p9,
  P9P: p9p,
  P10: p10,
  P11: p11,
  P12: p12,
  P13: p13,
  P14: p14,
  P15: p15,
  P16: p16,
  P17: p17,
  P18: p18,
  P19: p19,
  P20: p20,
  P21: p21,
  P22: p22,
  P23: p23,
  P24: p24,
  'P24-SQS': p24Sqs,
  P25: p25,
  P26: p26,
  'P1-SQS': p1Sqs,
  G1: g1,
  C1: c1,
  J1: j1,
  L1: l1,
  L2: l2,
  L3: l3,
  L4: l4,
  T1: t1,
  T2: t2,
  T3: t3,
};
/**
 * Scenarios run only when named with --only: C1 fills a 10-million-row table (minutes, GBs); P13
 * changes the MariaDB server's global settings for its run (put back after it); P14 sweeps the
 * dispatcher's settings (four P1 drains per run); P15 reads statement plans, not throughput; T3
 * loads the host on purpose (busy loops beside 12 dispatcher processes) for several minutes; P26
 * seeds a 500 000-row table before every migration it measures (several minutes).
 */
const ON_REQUEST = new Set(['C1', 'P13', 'P14', 'P15', 'T3', 'P26']);
const DEFAULT_SCENARIOS = Object.keys(SCENARIOS).filter((id) => !ON_REQUEST.has(id));

const RESULTS = join(__dirname, 'results');

interface Args {
  full: boolean;
  only: string[];
  runs: number | undefined;
  configure: boolean;
  /** `--profile [rabbitmq|kafka]`: profile that broker's drain instead of running scenarios. */
  profile: ProfiledBroker | undefined;
  /** `--profile-claims leases|partitions|stream`: how the profiled dispatcher shares the table. */
  profileClaims: ProfiledClaims;
  waitQuietMin: number;
}

function parseArgs(argv: string[]): Args {
  const args: Args = {
    full: false,
    only: DEFAULT_SCENARIOS,
    runs: undefined,
    configure: false,
    profile: undefined,
    profileClaims: 'leases',
    waitQuietMin: 0,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    const value = (): string => {
      const [, inline] = a.split('=');
      if (inline !== undefined) return inline;
      i++;
      return argv[i] ?? '';
    };
    if (a === '--full') args.full = true;
    else if (a === '--quick') args.full = false;
    else if (a.startsWith('--only'))
      args.only = value()
        .split(',')
        .map((s) => s.trim().toUpperCase())
        .filter((s) => s !== '');
    else if (a.startsWith('--runs')) args.runs = Number(value());
    else if (a === '--configure-postgres') args.configure = true;
    else if (a === '--profile' || a.startsWith('--profile=')) {
      const next = a.includes('=') ? a.split('=')[1] : argv[i + 1];
      const broker = next === 'kafka' || next === 'rabbitmq' ? next : undefined;
      if (a.includes('=') && broker === undefined) {
        throw new Error(`--profile takes rabbitmq or kafka, not ${String(next)}`);
      }
      if (broker !== undefined && !a.includes('=')) i++;
      args.profile = broker ?? 'rabbitmq';
    } else if (a.startsWith('--profile-claims')) {
      const claims = value();
      if (claims !== 'leases' && claims !== 'partitions' && claims !== 'stream') {
        throw new Error(`--profile-claims takes leases, partitions or stream, not ${claims}`);
      }
      args.profileClaims = claims;
    } else if (a.startsWith('--wait-quiet')) args.waitQuietMin = Number(value() || 20);
    else if (a === '--help' || a === '-h') {
      console.log(readFileSync(__filename, 'utf8').split('*/')[0]);
      process.exit(0);
    } else throw new Error(`unknown argument ${a} (see --help)`);
  }
  return args;
}

async function waitQuiet(minutes: number, log: (l: string) => void): Promise<boolean> {
  const deadline = Date.now() + minutes * 60_000;
  for (;;) {
    const n = otherJestProcesses();
    if (n === 0) return true;
    if (Date.now() > deadline) return false;
    log(`waiting for ${n} jest process(es) to finish (quiet machine for measurements)…`);
    await sleep(30_000);
  }
}

async function mariaVersion(): Promise<string> {
  try {
    await ensureMariaDatabase();
    const ds = await openMaria();
    const rows = await ds.query<{ v: string }[]>('SELECT VERSION() AS v');
    await closeDataSource(ds);
    return rows[0]?.v ?? '?';
  } catch (error) {
    return `unavailable (${error instanceof Error ? error.message : String(error)})`;
  }
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const started = Date.now();
  const log = (line: string): void =>
    console.log(`[${((Date.now() - started) / 1000).toFixed(1).padStart(6)}s] ${line}`);

  if (args.configure) {
    const busy = otherJestProcesses();
    if (busy > 0)
      log(
        `warning: ${busy} jest process(es) running; the restart drops their PostgreSQL connections`,
      );
    // On a fresh machine the bench's database is not there yet, and the settings are read in it.
    await ensurePgDatabase();
    await configurePostgres(log);
    return;
  }

  const profile: BenchProfile = PROFILES[args.full ? 'full' : 'quick'];
  const runs = args.runs ?? profile.runs;
  const quiet =
    args.waitQuietMin > 0 ? await waitQuiet(args.waitQuietMin, log) : otherJestProcesses() === 0;

  await ensurePgDatabase();
  await dropStaleRunObjects(log);
  const settings = await pgSettings();
  const pg = await openPostgres();
  const rabbit = await openRabbit();
  const mariadb = await mariaVersion();
  const env = {
    machine: machine(),
    postgres: settings.version,
    walLevel: settings.walLevel,
    pgStatStatements: settings.statStatements,
    mariadb,
    rabbitmq: rabbit.version,
    kafka: kafkaVersion(),
    library: libraryRevision(),
  };
  log(
    `profile ${profile.name}, ${runs} run(s) per measurement; ${env.machine.cores} cores, ${env.machine.memoryGiB} GiB, Node ${env.machine.node}`,
  );
  log(
    `library at ${env.library.commit}${env.library.libDirty ? ' with uncommitted changes in lib/' : ''}`,
  );
  log(
    `PostgreSQL ${env.postgres} (wal_level ${env.walLevel}), MariaDB ${env.mariadb}, RabbitMQ ${env.rabbitmq}, Kafka ${env.kafka}`,
  );
  if (settings.walLevel !== 'logical') log(`note: ${CONFIGURE_HINT}`);
  if (!quiet)
    log(`note: ${otherJestProcesses()} other jest process(es) are running: numbers are noisy`);
  // Only the sizes below the issue's: one set to it (BENCH_SIZE_…) is not scaled down.
  const scaledDown =
    profile.name === 'quick'
      ? (Object.keys(ISSUE_SIZES) as (keyof typeof ISSUE_SIZES)[]).filter(
          (size) => profile[size] < ISSUE_SIZES[size],
        )
      : [];
  if (scaledDown.length > 0) {
    const labels = { p1Messages: 'P1', p7History: 'P7 history', p8DrainMessages: 'P8 drain' };
    const listed = scaledDown
      .map((size) => `${labels[size]} ${profile[size]} instead of ${ISSUE_SIZES[size]}`)
      .join(', ');
    log(`quick profile: sizes scaled down (${listed}); use --full for the issue's sizes`);
  }

  const ctx: BenchContext = { profile, runs, pg, rabbit, pgSettings: settings, log };
  const results: ScenarioResult[] = [];
  try {
    if (args.profile !== undefined) {
      await profileDrain(ctx, RESULTS, args.profile, args.profileClaims);
      return;
    }
    for (const id of args.only) {
      const scenario = SCENARIOS[id];
      if (scenario === undefined) throw new Error(`unknown scenario ${id}`);
      log(`${id} …`);
      try {
        results.push(await scenario(ctx));
      } catch (error) {
        log(
          `${id} failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
        );
        results.push({
          id,
          title: 'failed',
          metrics: [],
          values: {},
          targets: [],
          notes: [],
          skipped: [`${id} failed: ${error instanceof Error ? error.message : String(error)}`],
        });
      }
    }
  } finally {
    await rabbit.close();
    await closeDataSource(pg);
  }

  const quietAtEnd = otherJestProcesses() === 0;
  const libraryAtEnd = libraryRevision();
  const libraryChanged =
    libraryAtEnd.libTree !== env.library.libTree || libraryAtEnd.libDirty !== env.library.libDirty;
  if (libraryChanged)
    log(
      `warning: the library changed during the run (${env.library.commit} → ${libraryAtEnd.commit}); child processes may have measured the newer code`,
    );
  console.log(renderTable(results));
  const scenarios = Object.fromEntries(results.map((r) => [r.id, scenarioJson(r)]));
  const targets = results.flatMap((r) =>
    r.targets.map((t) => ({ scenario: r.id, key: t.key, met: t.met })),
  );
  // What every scenario of this run is recorded with in the summary.
  const run = {
    generatedAt: new Date().toISOString(),
    profile: profile.name,
    runs,
    scaledDown:
      profile.name === 'quick'
        ? Object.fromEntries(
            scaledDown.map((size) => [size, [profile[size], ISSUE_SIZES[size]]] as const),
          )
        : null,
    sizes: profile,
    environment: env,
    quietMachine: { atStart: quiet, atEnd: quietAtEnd },
    libraryChangedDuringRun: libraryChanged,
    scenariosInRun: results.map((r) => r.id),
    durationS: Math.round((Date.now() - started) / 1000),
  };
  const key = resultsKey(profile);
  recordScenarios(RESULTS, key, run, scenarios);
  // The chart shows one complete, full-size run, so its bars come from the same machine state.
  const chart = DEFAULT_SCENARIOS.every((id) => args.only.includes(id)) && key === profile.name;
  if (chart) renderChart(join(RESULTS, 'throughput.svg'), { ...run, scenarios });
  log(
    `recorded ${results.map((r) => r.id).join(', ')} under "${key}" in bench/results/${SUMMARY_FILE}${chart ? ' and drew bench/results/throughput.svg' : ''} (${targets.filter((t) => t.met).length}/${targets.length} targets met)`,
  );
}

// A step awaiting something that can never happen (a dead connection's close) with nothing else
// pending would otherwise end the process silently, with exit code 0 and no results.
process.on('beforeExit', () => {
  console.error('bench stopped: a step was waiting for something that can no longer happen');
  process.exit(1);
});

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
