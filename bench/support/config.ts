/** Sizes and settings of one benchmark profile, and where the services are. */
import { SERVICES as TEST_SERVICES } from '../../test/support/services';

export type ProfileName = 'quick' | 'full';

export interface BenchProfile {
  readonly name: ProfileName;
  /** Repetitions of each measurement. */
  readonly runs: number;
  /** P1: backlog drained by the module and the bare relay (the issue's size is 200 000). */
  readonly p1Messages: number;
  /** P1: backlog for the naive relay (about 1 300 msgs/s, so smaller in the quick profile). */
  readonly naiveMessages: number;
  /** P1: backlog for pg-transactional-outbox (about 1 100 msgs/s at best). */
  readonly pgtoMessages: number;
  /** P1: backlog for pg-transactional-outbox as its README configures it (sequential). */
  readonly pgtoReadmeMessages: number;
  readonly p2Messages: number;
  readonly p3Messages: number;
  /** P4: length of each steady-load window, and the load. */
  readonly p4DurationMs: number;
  readonly p4Rate: number;
  /** P4's second load: the issue's 5 000 msgs/s, LISTEN/NOTIFY only. */
  readonly p4HighRate: number;
  /** P4: messages per transaction of the writers' second 5 000 msgs/s window. */
  readonly p4HighBatch: number;
  readonly p4Writers: number;
  /** P5: transactions per measurement (one order + one event), and batches of 100 events. */
  readonly p5Transactions: number;
  readonly p5Batches: number;
  readonly p6Messages: number;
  /** P7: delivered rows kept in the table, and the backlog drained over them. */
  readonly p7History: number;
  readonly p7Messages: number;
  /** P8: idle window, and the drain whose RSS is sampled. */
  readonly p8IdleMs: number;
  readonly p8DrainMessages: number;
  /** P9: messages queued behind one dead-headed key, claims of 200 other-key rows timed, databases. */
  readonly p9Blocked: number;
  readonly p9Claims: number;
  /** P9: other-key messages pending when the claims start (each claim pair adds 200 more). */
  readonly p9Pool: number;
  /** P9: time budget of one run's steady claims per database, in seconds (a slow claim ends it early). */
  readonly p9BudgetS: number;
  /** P10: delivered rows kept in the table that the cleaner passes over, then deletes. */
  readonly p10History: number;
  /** P12: transactions per measurement (one order + one event), and batches of 100 events. */
  readonly p12Transactions: number;
  readonly p12Batches: number;
  /** P17: messages enqueued and drained per dispatcher setting and run, and each one's JSON size. */
  readonly p17Messages: number;
  readonly p17PayloadBytes: number;
  /** L1: the backlog drained with log tailing, polling and the bare relay (a key per message). */
  readonly l1Messages: number;
  /** L2: length of each latency window, and the load (commit → consumer, log vs poll). */
  readonly l2DurationMs: number;
  readonly l2Rate: number;
  /** L3: length of the full-rate window of the writers, how many, and messages per transaction. */
  readonly l3DurationMs: number;
  readonly l3Writers: number;
  readonly l3PerTransaction: number;
  /** L4: messages whose WAL / binlog bytes are counted, enqueued and delivered. */
  readonly l4Messages: number;
  /** T1: the write load (msgs/s, one per transaction) while a dispatcher is killed and taken over. */
  readonly t1Rate: number;
  /** P9's databases; BENCH_P9_DATABASES=postgres,sqlite picks some. */
  readonly p9Dialects: readonly ('postgres' | 'mariadb' | 'sqlite')[];
}

const P9_DATABASES = (process.env.BENCH_P9_DATABASES ?? 'postgres,mariadb,sqlite')
  .split(',')
  .map((s) => s.trim())
  .filter((s): s is 'postgres' | 'mariadb' | 'sqlite' =>
    ['postgres', 'mariadb', 'sqlite'].includes(s),
  );

const BASE_PROFILES: Record<ProfileName, BenchProfile> = {
  quick: {
    name: 'quick',
    runs: 3,
    p1Messages: 20_000,
    naiveMessages: 5_000,
    pgtoMessages: 5_000,
    pgtoReadmeMessages: 1_000,
    p2Messages: 20_000,
    p3Messages: 10_000,
    p4DurationMs: 4_000,
    p4Rate: 1_000,
    p4HighRate: 5_000,
    p4HighBatch: 4,
    p4Writers: 8,
    p5Transactions: 2_000,
    p5Batches: 200,
    p6Messages: 20_000,
    p7History: 200_000,
    p7Messages: 20_000,
    p8IdleMs: 6_000,
    // The issue's size in both profiles: RSS over 100 000 messages spans one or two major
    // collections, and which half of the drain the taller GC sawtooth lands in decided the
    // comparison (+11.3 % at 100 000 on 2026-11-25, -16.8 % at 1 000 000 the same day).
    p8DrainMessages: 1_000_000,
    p9Blocked: 100_000,
    p9Claims: 200,
    p9Pool: 600,
    p9BudgetS: 60,
    p10History: 1_000_000,
    p12Transactions: 600,
    p12Batches: 60,
    p17Messages: 8,
    p17PayloadBytes: 10 * 2 ** 20,
    l1Messages: 5_000,
    l2DurationMs: 4_000,
    l2Rate: 1_000,
    l3DurationMs: 5_000,
    l3Writers: 8,
    l3PerTransaction: 10,
    l4Messages: 5_000,
    t1Rate: 1_000,
    p9Dialects: P9_DATABASES,
  },
  full: {
    name: 'full',
    runs: 5,
    p1Messages: 200_000,
    naiveMessages: 50_000,
    pgtoMessages: 50_000,
    pgtoReadmeMessages: 10_000,
    p2Messages: 200_000,
    p3Messages: 100_000,
    p4DurationMs: 20_000,
    p4Rate: 1_000,
    p4HighRate: 5_000,
    p4HighBatch: 4,
    p4Writers: 8,
    p5Transactions: 3_000,
    p5Batches: 300,
    p6Messages: 100_000,
    p7History: 1_000_000,
    p7Messages: 100_000,
    p8IdleMs: 30_000,
    p8DrainMessages: 1_000_000,
    p9Blocked: 100_000,
    p9Claims: 500,
    p9Pool: 600,
    p9BudgetS: 300,
    p10History: 10_000_000,
    p12Transactions: 3_000,
    p12Batches: 300,
    p17Messages: 16,
    p17PayloadBytes: 10 * 2 ** 20,
    // The outside measurement's sizes (30 000 × 1 KiB, a key per message).
    l1Messages: 30_000,
    l2DurationMs: 20_000,
    l2Rate: 1_000,
    l3DurationMs: 30_000,
    l3Writers: 8,
    l3PerTransaction: 10,
    l4Messages: 30_000,
    t1Rate: 1_000,
    p9Dialects: P9_DATABASES,
  },
};

/**
 * The profiles; BENCH_SCALE (e.g. 0.1) shrinks every size, for trying the harness out quickly.
 */
export const SCALE = Number(process.env.BENCH_SCALE ?? 1);
export const PROFILES: Record<ProfileName, BenchProfile> = sized(
  scaled(BASE_PROFILES, SCALE),
  sizeOverrides(process.env),
);

/**
 * `BENCH_SIZE_<size>=N` sets one size of both profiles, e.g. `BENCH_SIZE_p7History=10000000`
 * for P7 over ten million retained rows; the run's sizes are recorded with its figures.
 */
function sizeOverrides(vars: NodeJS.ProcessEnv): Record<string, number> {
  const overrides: Record<string, number> = {};
  for (const [name, value] of Object.entries(vars)) {
    const size = /^BENCH_SIZE_(\w+)$/.exec(name)?.[1];
    if (size === undefined || value === undefined) continue;
    const n = Number(value);
    if (!(size in BASE_PROFILES.quick) || !Number.isSafeInteger(n) || n < 1) {
      throw new Error(`${name}=${value}: not a size of the profiles, or not a positive integer`);
    }
    overrides[size] = n;
  }
  return overrides;
}

function sized(
  profiles: Record<ProfileName, BenchProfile>,
  overrides: Record<string, number>,
): Record<ProfileName, BenchProfile> {
  if (Object.keys(overrides).length === 0) return profiles;
  return {
    quick: { ...profiles.quick, ...overrides },
    full: { ...profiles.full, ...overrides },
  };
}

/**
 * The name a profile's results are kept under in bench/results/summary.json: a run scaled down
 * with BENCH_SCALE is kept apart (`quick@0.05`), so trying the harness out never replaces a
 * real measurement.
 */
export function resultsKey(profile: BenchProfile): string {
  return SCALE > 0 && SCALE !== 1 ? `${profile.name}@${SCALE}` : profile.name;
}

function scaled(
  profiles: Record<ProfileName, BenchProfile>,
  factor: number,
): Record<ProfileName, BenchProfile> {
  if (!(factor > 0) || factor === 1) return profiles;
  const shrink = (p: BenchProfile): BenchProfile =>
    Object.fromEntries(
      Object.entries(p).map(([k, v]) => [
        k,
        typeof v === 'number' &&
        ![
          'runs',
          'p4Rate',
          'p4HighRate',
          'p4HighBatch',
          'p4Writers',
          'p9BudgetS',
          'p9Pool',
          'p17Messages',
          'l2Rate',
          'l3Writers',
          'l3PerTransaction',
          't1Rate',
        ].includes(k)
          ? Math.max(100, Math.round(v * factor))
          : v,
      ]),
    ) as unknown as BenchProfile;
  return { quick: shrink(profiles.quick), full: shrink(profiles.full) };
}

/** The issue's sizes, printed next to scaled-down ones. */
export const ISSUE_SIZES = {
  p1Messages: 200_000,
  p7History: 1_000_000,
  p8DrainMessages: 1_000_000,
} as const;

/** Number of distinct message keys in every backlog (P1: ordering on, 1 000 keys). */
export const KEYS = 1_000;
/** Size of each message's JSON payload. */
export const PAYLOAD_BYTES = 1_024;

const env = process.env;

/**
 * Where the brokers are: the tests' SERVICES (same variables), as the clients want them. The
 * database servers' host, port and login are the tests' too (test/support/databases.ts
 * serverConnection); only the database names are the bench's own.
 */
export const SERVICES = {
  postgres: {
    /** The bench works in a database of its own (created when missing) so its counters are its own. */
    database: env.BENCH_PGDATABASE ?? 'outbox_bench',
    cluster: env.BENCH_PG_CLUSTER ?? '15 main',
  },
  mariadb: { database: env.BENCH_MYSQL_DATABASE ?? 'outbox_bench' },
  rabbitmq: {
    url:
      env.RABBITMQ_URL ??
      `amqp://guest:guest@${TEST_SERVICES.rabbitmq.host}:${TEST_SERVICES.rabbitmq.port}`,
  },
  kafka: { brokers: [`${TEST_SERVICES.kafka.host}:${TEST_SERVICES.kafka.port}`] },
  tcp: { host: '127.0.0.1', port: Number(env.BENCH_TCP_PORT ?? 4599) },
} as const;

/**
 * Names of everything a run creates (tables, queues, topics, the replication slot) carry this
 * run's id, so that two benches on one machine never drop each other's tables or slot. Children
 * inherit it through the environment.
 */
export const RUN_ID = (process.env.BENCH_RUN_ID ??= `r${process.pid}`);

/** `base` made unique to this run (`sep` joins: '_' for SQL names, '.' for queues, '-' for topics). */
export const named = (base: string, sep = '_'): string => `${base}${sep}${RUN_ID}`;
