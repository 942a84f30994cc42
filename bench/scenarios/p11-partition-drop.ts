/**
 * P11: retention by DELETE vs by dropping a partition. The same history of delivered rows,
 * three days old, deleted by the cleaner's chunked DELETEs from the plain table, and dropped with
 * its partition by the partition maintainer from a table partitioned by day (docs/partitioning.md),
 * on PostgreSQL and MariaDB.
 */
import type { DataSource } from 'typeorm';
import { OutboxCleaner } from '../../lib';
import { outboxPartitions } from '../../lib/schema';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import { named } from '../support/config';
import {
  analyse,
  closeDataSource,
  dropOutboxTable,
  openMaria,
  resetOutboxTable,
  seedOutbox,
} from '../support/databases';
import { startOutboxApp } from '../support/outbox-app';
import { partitionedTableWithPast } from '../support/partitions';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { ratio } from '../support/stats';

const PLAIN = named('bench_p11_plain');
const PARTITIONED = named('bench_p11_part');
const DAY = 86_400_000;
const AGE_DAYS = 3;

export async function p11(ctx: BenchContext): Promise<ScenarioResult> {
  const h = ctx.profile.p10History;
  const result = newResult(
    'P11',
    `Retention of ${h.toLocaleString('en-US')} delivered rows: the cleaner's DELETE vs dropping their partition (PostgreSQL, MariaDB)`,
  );
  const maria = await openMaria();
  try {
    for (const [name, ds] of [
      ['postgres', ctx.pg],
      ['mariadb', maria],
    ] as const) {
      const deletes: number[] = [];
      const drops: number[] = [];
      for (let run = 1; run <= ctx.runs; run++) {
        await resetOutboxTable(ds, PLAIN);
        await seedOutbox(ds, PLAIN, h, { status: 'delivered', ageDays: AGE_DAYS });
        await analyse(ds, PLAIN);
        deletes.push(await purgeAll(ds, h));
        await dropOutboxTable(ds, PLAIN);

        await partitionedTableWithPast(ds, PARTITIONED, AGE_DAYS);
        await seedOutbox(ds, PARTITIONED, h, { status: 'delivered', ageDays: AGE_DAYS });
        await analyse(ds, PARTITIONED);
        drops.push(await dropOld(ds, h));
        await dropOutboxTable(ds, PARTITIONED);
        ctx.log(
          `P11 ${name} run ${run}: DELETE ${deletes.at(-1)?.toFixed(2)} s, partition drop ${drops.at(-1)?.toFixed(3)} s`,
        );
      }
      const del = addMetric(
        result,
        `${name}_delete_s`,
        `${name}: delete ${h.toLocaleString('en-US')} rows (cleaner's chunked DELETE)`,
        's',
        deletes,
        h,
      );
      const drop = addMetric(
        result,
        `${name}_drop_s`,
        `${name}: drop their partition (maintainer run)`,
        's',
        drops,
        h,
      );
      addTarget(
        result,
        `p11_${name}_delete_vs_drop`,
        `${name}: DELETE time / partition drop time`,
        ratio(del.median, drop.median),
        '>=',
        1,
      );
    }
  } finally {
    for (const ds of [ctx.pg, maria]) {
      await dropOutboxTable(ds, PLAIN);
      await dropOutboxTable(ds, PARTITIONED);
    }
    await closeDataSource(maria);
  }
  return result;
}

/** Seconds for one maintainer run to drop the history's partition. */
async function dropOld(ds: DataSource, expected: number): Promise<number> {
  const partitions = outboxPartitions(typeormSqlPort(ds), { tableName: PARTITIONED });
  const start = performance.now();
  const report = await partitions.maintain(
    { premake: 1, retentionMs: DAY, deadRetentionMs: null },
    false,
  );
  const seconds = (performance.now() - start) / 1000;
  const [left] = await ds.query<{ n: string | number }[]>(
    `SELECT count(*) AS n FROM ${ds.options.type === 'postgres' ? `"${PARTITIONED}"` : `\`${PARTITIONED}\``}`,
  );
  if (report.dropped.length !== 1 || Number(left?.n) !== 0) {
    throw new Error(
      `P11: the maintainer dropped ${report.dropped.join(', ') || 'nothing'} of ${expected} rows (${report.skipped ?? JSON.stringify(report.kept)}), ${String(left?.n)} left`,
    );
  }
  return seconds;
}

/** Seconds for the cleaner to delete every delivered row, pass after pass as its timer would. */
async function purgeAll(ds: DataSource, expected: number): Promise<number> {
  const app = await startOutboxApp({
    dataSource: ds,
    tableName: PLAIN,
    publisher: { publish: (m) => Promise.resolve(m.map(() => ({ ok: true as const }))) },
    autoStart: false,
    cleaner: { deliveredRetentionMs: DAY },
  });
  try {
    const cleaner = app.app.get(OutboxCleaner);
    let deleted = 0;
    const start = performance.now();
    for (;;) {
      const { delivered } = await cleaner.runOnce();
      if (delivered === 0) break;
      deleted += delivered;
    }
    const seconds = (performance.now() - start) / 1000;
    if (deleted !== expected)
      throw new Error(`P11: the cleaner deleted ${deleted} of ${expected} rows`);
    return seconds;
  } finally {
    await app.close();
  }
}
