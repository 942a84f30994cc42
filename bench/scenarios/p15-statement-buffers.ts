/**
 * P15: what the dispatcher's statements read on PostgreSQL, in shared buffers per message, from
 * `EXPLAIN (ANALYZE, BUFFERS)` of each statement (each run inside a transaction rolled back at
 * the end): (a) the module's claim of 500 (the default batch) and its settle, with the promotion
 * of the keys' next messages in the same statement as the store runs it (and as it runs on a
 * table made before schema step 5's waiting index), against the bare relay's claim of 500 and
 * the settle of the rows it claimed, each on a fresh backlog with one key per message; (b) the
 * claim and settle of a 200-message batch on a table partitioned by day with
 * eight partitions, with and without partition pruning. Counts of buffers do not depend on how
 * busy the machine is, so this locates costs where timings on this machine cannot. The module's
 * statements are explained in their generic plans, the ones the store runs (`PREPARE`, then
 * `EXPLAIN … EXECUTE`): an `EXPLAIN` with the values plans for those values, and once showed a
 * claim hashing what its generic plan read again per row. (a) also gives each claim's execution
 * time per message, and the module's ÷ the bare relay's of the same run. Runs only when named
 * (`--only P15`).
 */
import type { QueryRunner } from 'typeorm';
import {
  postgresClaim,
  postgresOpening,
  postgresSettle,
} from '../../lib/store/postgres/postgres.sql';
import { tableNamesFor } from '../../lib/store/schema/outbox-table-ddl';
import type { OutboxTableNames } from '../../lib/internal/sql-identifier';
import { periodStart, partitionSuffix } from '../../lib/store/partitions/partition-range';
import { named } from '../support/config';
import { analyse, dropOutboxTable, resetOutboxTable, seedOutbox } from '../support/databases';
import { resetPartitionedTable } from '../support/partitions';
import { addMetric, newResult, type BenchContext, type ScenarioResult } from '../support/report';
import { round, summarise } from '../support/stats';
import { promotionRun, queuePolicyOf } from '../../lib/options/queue-policy';
import { claimWindow } from '../../lib/store/shared-sql/claim-window';
import { bareClaimSql, bareSettleSql } from '../baselines/bare-relay';
import { postgresLiterals } from '../../lib/store/postgres/postgres-literal';

const PLAIN = named('bench_p15');
const PARTED = named('bench_p15_part');
const DAY = 86_400_000;
const POLICY = queuePolicyOf();
const DELIVERED = { delivered: true, retry: false, dead: false, release: false };
/** The dispatcher's default batch, the size of both relays' batches in (a). */
const BATCH = 500;
/** (b)'s batch, as before (a) moved to the default batch. */
const PARTED_BATCH = 200;

export async function p15(ctx: BenchContext): Promise<ScenarioResult> {
  const { pg } = ctx;
  const result = newResult(
    'P15',
    'Shared buffers each statement reads on PostgreSQL, per message (EXPLAIN ANALYZE BUFFERS)',
  );
  const runner = pg.createQueryRunner();
  await runner.connect();
  const perMessage: Record<string, number[]> = {};
  const add = (key: string, value: number): void => void (perMessage[key] ??= []).push(value);
  // Claim execution times, µs per message, and the module's ÷ the bare relay's per run.
  const claimUs: Record<string, number[]> = {};
  const addUs = (key: string, value: number): void => void (claimUs[key] ??= []).push(value);
  try {
    // (a) The module's batch against the bare relay's, one key per message.
    const names = tableNamesFor('postgres', { tableName: PLAIN });
    for (let run = 1; run <= ctx.runs; run++) {
      await resetOutboxTable(pg, PLAIN);
      await seedOutbox(pg, PLAIN, 20_000, { keys: 20_000 });
      await analyse(pg, PLAIN);
      // The module's claim and settle as the store runs them on a table of this version (with
      // schema step 5's waiting index), then the bare relay's on a fresh copy of the backlog:
      // a statement reads what the rolled-back ones before it left behind (dead row versions,
      // index entries). Until 2026-11-25 the bare relay ran on the module's leftovers, and its
      // settle marked 500 rows it had not claimed (the first by id as text: one row version
      // each), which showed it reading 12.8 buffers a message where it reads as many as the
      // module. The settle of a table made before step 5 is measured last, on a fresh copy too.
      const moduleBatch = (waitingIndex: boolean): Promise<void> =>
        inRolledBack(runner, async () => {
          const token = `00000000-0000-4000-8000-${String(run).padStart(12, '0')}`;
          const claim = await explainClaim(runner, names, token);
          const rows = await rowsOf<{ id: string; message_key: string }[]>(
            runner,
            `SELECT id::text AS id, message_key FROM "${PLAIN}" WHERE lock_token = $1`,
            [token],
          );
          const keys = rows.map((r) => r.message_key);
          const { buffers: settle } = await explain(
            runner,
            postgresSettle(names, DELIVERED, false, false, false, POLICY, waitingIndex),
            [token, rows.map((r) => r.id), keys, promotionRun(POLICY, keys.length)],
          );
          if (!waitingIndex) {
            add('module_settle_before_step_5', settle / rows.length);
            return;
          }
          add('module_claim', claim.buffers / rows.length);
          addUs('module_claim', (1000 * claim.ms) / rows.length);
          add('module_settle', settle / rows.length);
          add('module_total', (claim.buffers + settle) / rows.length);
        });
      await moduleBatch(true);
      await resetOutboxTable(pg, PLAIN);
      await seedOutbox(pg, PLAIN, 20_000, { keys: 20_000 });
      await analyse(pg, PLAIN);
      await inRolledBack(runner, async () => {
        // As the bare relay sends it: a plan for its values (an unnamed statement).
        const claim = await explain(runner, bareClaimSql(PLAIN), [BATCH], 'custom');
        const claimed = await rowsOf<{ id: string }[]>(
          runner,
          `SELECT id::text AS id FROM "${PLAIN}" WHERE locked_by = 'bare'`,
        );
        const settle = (
          await explain(runner, bareSettleSql(PLAIN), [claimed.map((r) => r.id)], 'custom')
        ).buffers;
        add('bare_claim', claim.buffers / claimed.length);
        addUs('bare_claim', (1000 * claim.ms) / claimed.length);
        add('bare_settle', settle / claimed.length);
        add('bare_total', (claim.buffers + settle) / claimed.length);
      });
      await resetOutboxTable(pg, PLAIN);
      // As a table made before schema step 5 is: without the waiting index.
      await pg.query(`DROP INDEX "${PLAIN}_waiting_idx"`);
      await seedOutbox(pg, PLAIN, 20_000, { keys: 20_000 });
      await analyse(pg, PLAIN);
      await moduleBatch(false);
    }
    await dropOutboxTable(pg, PLAIN);

    // (b) A partitioned table of eight partitions: today, one ahead, the catch-all, and five past days.
    await resetPartitionedTable(pg, PARTED);
    const today = periodStart('day', new Date()).getTime();
    for (let d = 1; d <= 5; d++) {
      const from = new Date(today - d * DAY);
      await pg.query(
        `CREATE TABLE "${PARTED}_${partitionSuffix(from)}" PARTITION OF "${PARTED}" FOR VALUES FROM ('${from.toISOString()}') TO ('${new Date(from.getTime() + DAY).toISOString()}')`,
      );
    }
    await seedOutbox(pg, PARTED, 5_000, { keys: 5_000 });
    await analyse(pg, PARTED);
    const parted = tableNamesFor('postgres', { tableName: PARTED });
    for (let run = 1; run <= ctx.runs; run++) {
      for (const pruned of [false, true]) {
        await inRolledBack(runner, async () => {
          const token = `00000000-0000-4000-8000-${String(run * 10 + Number(pruned)).padStart(12, '0')}`;
          const claim = await explainClaim(runner, parted, token, pruned, PARTED_BATCH);
          const rows = await rowsOf<{ id: string; created_at: Date }[]>(
            runner,
            `SELECT id::text AS id, created_at FROM "${PARTED}" WHERE lock_token = $1`,
            [token],
          );
          const times = rows.map((r) => r.created_at.getTime());
          const { buffers: settle } = await explain(
            runner,
            postgresSettle(parted, DELIVERED, false, true, pruned),
            pruned
              ? [
                  token,
                  new Date(Math.min(...times) - 1),
                  new Date(Math.max(...times) + 1),
                  rows.map((r) => r.id),
                ]
              : [token, rows.map((r) => r.id)],
          );
          const kind = pruned ? 'pruned' : 'unpruned';
          add(`partitioned_claim_${kind}`, claim.buffers / rows.length);
          add(`partitioned_settle_${kind}`, settle / rows.length);
        });
      }
    }
  } finally {
    await runner.release();
    await dropOutboxTable(pg, PLAIN);
    await dropOutboxTable(pg, PARTED);
  }
  for (const [key, values] of Object.entries(perMessage)) {
    const summary = addMetric(
      result,
      `${key}_buffers_per_msg`,
      key.replace(/_/g, ' '),
      'buffers/msg',
      values,
    );
    result.values[`p15_${key}_buffers_per_msg`] = round(summary.median, 1);
  }
  const [moduleUs = [], bareUs = []] = [claimUs.module_claim, claimUs.bare_claim];
  for (const [key, values] of Object.entries(claimUs)) {
    const summary = addMetric(
      result,
      `${key}_us_per_msg`,
      `${key.replace(/_/g, ' ')} execution`,
      'µs/msg',
      values,
    );
    result.values[`p15_${key}_us_per_msg`] = round(summary.median, 1);
  }
  const ratios = moduleUs.map((us, i) => us / (bareUs[i] ?? Number.NaN));
  result.values.p15_module_claim_vs_bare_claim_time = round(summarise(ratios).median, 2);
  return result;
}

/**
 * The module's claim of `limit` (and its window) under `token`, explained; `partitioned`, the
 * form that finds each candidate by its partition key (partition pruning).
 */
function explainClaim(
  runner: QueryRunner,
  names: OutboxTableNames,
  token: string,
  partitioned = false,
  limit = BATCH,
): Promise<Explained> {
  return explain(runner, postgresClaim(names, POLICY, partitioned), [
    'bench',
    token,
    30_000,
    limit,
    claimWindow(limit),
    POLICY.maxRun,
  ]);
}

/** Runs `work` in a transaction with the dispatcher's settings, rolled back after it. */
async function inRolledBack(runner: QueryRunner, work: () => Promise<void>): Promise<void> {
  await runner.query('BEGIN');
  try {
    for (const statement of postgresOpening(10_000, 1, [])) await runner.query(statement);
    await work();
  } finally {
    await runner.query('ROLLBACK');
  }
}

/** The rows of a statement run on `runner` (TypeORM types them as any). */
async function rowsOf<T>(runner: QueryRunner, sql: string, params: unknown[] = []): Promise<T> {
  return (await runner.query(sql, params)) as T;
}

interface Explained {
  /** Shared buffers (hit + read) the plan reports at its top node. */
  readonly buffers: number;
  /** Its execution time, ms (`EXPLAIN ANALYZE` with `TIMING OFF`: no per-node clocks). */
  readonly ms: number;
}

/**
 * Runs `sql` under `EXPLAIN (ANALYZE, BUFFERS, TIMING OFF)`. With `plan` 'generic' (the
 * module's statements), as a named statement executed with its values written in, so the plan
 * is the generic one that `plan_cache_mode` (set by the transaction's opening) makes the store
 * run; with 'custom', bound as the bare relay sends it, a plan for its values.
 */
async function explain(
  runner: QueryRunner,
  sql: string,
  params: unknown[],
  plan: 'generic' | 'custom' = 'generic',
): Promise<Explained> {
  let rows: Record<string, string>[];
  if (plan === 'custom') {
    rows = await rowsOf(runner, `EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) ${sql}`, params);
  } else {
    const literals = postgresLiterals(params);
    if (literals === undefined) throw new Error('P15: a value that cannot be written in');
    await runner.query(`PREPARE p15_statement AS ${sql}`);
    try {
      rows = await rowsOf(
        runner,
        `EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) EXECUTE p15_statement(${literals.join(', ')})`,
      );
    } finally {
      // After a failed EXPLAIN the transaction refuses it; the failure is the one to report.
      await runner.query('DEALLOCATE p15_statement').catch(() => undefined);
    }
  }
  const lines = rows.map((r) => Object.values(r)[0] ?? '');
  const line = lines.find((l) => l.includes('Buffers:')) ?? '';
  const hit = Number(/shared hit=(\d+)/.exec(line)?.[1] ?? 0);
  const read = Number(/read=(\d+)/.exec(line)?.[1] ?? 0);
  const ms = Number(/Execution Time: ([\d.]+)/.exec(lines.join('\n'))?.[1] ?? Number.NaN);
  return { buffers: hit + read, ms };
}
