/**
 * T2: what the takeover look costs (issue 75, item 13), on PostgreSQL. Every dispatcher with an
 * owner lock looks for the leases of ended owners 10 times a second. A look used to read the
 * server's lock table each time (`pg_locks`, whose cost grows with every advisory lock the
 * server holds: key locks of enqueues, other apps'); now one look a second lists the owners
 * holding their lock, and the nine between try only the owners listed, each by its lock.
 *
 * Four owner locks are held on sessions of their own, as four dispatchers would, and
 * `T2_OTHER_LOCKS` (2 000) other advisory locks on one more session (0 in the first round).
 * Measured from this process, per statement: the list (`POSTGRES_LIVE_OWNERS`) and the probe of
 * the four (`POSTGRES_FREE_OWNERS`, autocommit); from them, the look's database time per
 * dispatcher and second, before (10 lists) and after (1 list + 9 probes).
 */
import type { DataSource, QueryRunner } from 'typeorm';
import { POSTGRES_FREE_OWNERS, POSTGRES_LIVE_OWNERS } from '../../lib/store/postgres/postgres.sql';
import { newOwnerKey, POSTGRES_OWNER_LOCK_CLASS } from '../../lib/store/shared-sql/owner-leases';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { nowMs } from '../support/stats';

const OWNERS = 4;
const OTHER_LOCKS = 2_000;
const CALLS = 400;

async function timeEach(runner: QueryRunner, sql: string, params: unknown[]): Promise<number> {
  // Warm: the statement's plan and the connection's caches.
  for (let i = 0; i < 20; i++) await runner.query(sql, params);
  const start = nowMs();
  for (let i = 0; i < CALLS; i++) await runner.query(sql, params);
  return (nowMs() - start) / CALLS;
}

async function round(ds: DataSource, others: number): Promise<{ list: number; probe: number }> {
  const held: QueryRunner[] = [];
  try {
    const keys: number[] = [];
    for (let o = 0; o < OWNERS; o++) {
      const runner = ds.createQueryRunner();
      await runner.connect();
      held.push(runner);
      const key = newOwnerKey();
      await runner.query('SELECT pg_advisory_lock($1::int4, $2::int4)', [
        POSTGRES_OWNER_LOCK_CLASS,
        key,
      ]);
      keys.push(key);
    }
    if (others > 0) {
      const runner = ds.createQueryRunner();
      await runner.connect();
      held.push(runner);
      await runner.query('SELECT pg_advisory_lock(7, k) FROM generate_series(1, $1::int4) AS k', [
        others,
      ]);
    }
    const looker = ds.createQueryRunner();
    await looker.connect();
    held.push(looker);
    const list = await timeEach(looker, POSTGRES_LIVE_OWNERS, [POSTGRES_OWNER_LOCK_CLASS]);
    const probe = await timeEach(looker, POSTGRES_FREE_OWNERS, [POSTGRES_OWNER_LOCK_CLASS, keys]);
    return { list, probe };
  } finally {
    for (const runner of held.reverse()) {
      await runner.query('SELECT pg_advisory_unlock_all()').catch(() => undefined);
      await runner.release();
    }
  }
}

export async function t2(ctx: BenchContext): Promise<ScenarioResult> {
  const result = newResult(
    'T2',
    `The takeover look's cost on PostgreSQL: a list of the live owners (pg_locks) against a probe of ${OWNERS} known owners by their locks, with 0 and ${OTHER_LOCKS} other advisory locks held (${ctx.runs} runs of ${CALLS} calls each)`,
  );
  for (const others of [0, OTHER_LOCKS]) {
    const lists: number[] = [];
    const probes: number[] = [];
    for (let r = 0; r < ctx.runs; r++) {
      const { list, probe } = await round(ctx.pg, others);
      lists.push(list);
      probes.push(probe);
    }
    const list = addMetric(
      result,
      `t2_list_${others}_ms`,
      `list, ${others} other locks`,
      'ms',
      lists,
    );
    const probe = addMetric(
      result,
      `t2_probe_${others}_ms`,
      `probe, ${others} other locks`,
      'ms',
      probes,
    );
    const before = 10 * list.median;
    const after = list.median + 9 * probe.median;
    result.values[`t2_look_ms_per_s_before_${others}`] = Math.round(before * 100) / 100;
    result.values[`t2_look_ms_per_s_after_${others}`] = Math.round(after * 100) / 100;
    addTarget(
      result,
      `t2_after_vs_before_${others}`,
      `look time per dispatcher and second, after / before, ${others} other locks`,
      after / before,
      '<=',
      0.5,
    );
  }
  return result;
}
