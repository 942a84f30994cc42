/**
 * C1: the operations console over 10 000 000 outbox rows on PostgreSQL. The table is filled in
 * SQL (mostly delivered history over the last day, some thousands of dead letters spread through
 * it, a few thousand pending, parked and stuck rows at its end), then every console page is
 * fetched over HTTP from a real Nest app (Express) and timed; each page's queries are planned
 * with EXPLAIN and printed, so a scan of the whole table shows in the log.
 */
import { Module, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { DataSource, Logger as TypeOrmLogger } from 'typeorm';
import { OutboxAdmin, OutboxModule } from '../../lib';
import { OutboxConsoleModule } from '../../lib/operations/console';
import { BacklogSampler } from '../../lib/operations/console/backlog-sampler';
import { ensureOutboxTable } from '../../lib/typeorm/typeorm-tables';
import { RecordingPublisher } from '../../lib/testing';
import { named } from '../support/config';
import { closeDataSource, dropOutboxTable, openPostgres } from '../support/databases';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { percentile } from '../support/stats';

const TABLE = named('bench_c1_console');
const ROWS = Number(process.env.BENCH_C1_ROWS ?? 10_000_000);
/** Every 2 000th row of the history is a dead letter (5 000 in 10 000 000). */
const DEAD_EVERY = 2_000;
/** The newest rows: pending (some with an expired lease), and parked behind dead heads. */
const PENDING = 4_000;
const WAITING = 1_000;
const STUCK = 100;
const TOPICS = 20;
const KEYS = 100_000;
const REQUESTS = 20;
const TARGET_MS = 1_000;
const SLICE = 1_000_000;

/** Writes the table in slices of a million rows, indexes dropped first and rebuilt after. */
async function fill(pg: DataSource, log: (line: string) => void): Promise<void> {
  const t = `"${TABLE}"`;
  await dropOutboxTable(pg, TABLE);
  await ensureOutboxTable(pg, { tableName: TABLE });
  const indexes = await pg.query<{ name: string }[]>(
    `SELECT indexname AS name FROM pg_indexes WHERE tablename = $1 AND indexname NOT IN (SELECT conname FROM pg_constraint)`,
    [TABLE],
  );
  for (const { name } of indexes) await pg.query(`DROP INDEX "${name}"`);
  const history = ROWS - PENDING - WAITING;
  const started = performance.now();
  for (let from = 1; from <= ROWS; from += SLICE) {
    const to = Math.min(ROWS, from + SLICE - 1);
    // Row g was created (ROWS - g) × (one day / ROWS) ago: a day of history, newest last.
    await pg.query(
      `INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, headers, status,
  attempts, available_at, created_at, delivered_at, dead_at, last_error, last_attempt_at,
  locked_by, lock_token, locked_until)
SELECT gen_random_uuid(), 'topic-' || (g % ${TOPICS}), 'k' || (g % ${KEYS}),
  (ARRAY['order.created', 'order.paid', 'order.shipped'])[1 + g % 3],
  ('{"order":' || g || ',"total":' || (g % 997) || '}')::jsonb, '{}'::jsonb,
  CASE WHEN g > $1::int + $2::int THEN 'waiting' WHEN g > $1::int THEN 'pending'
    WHEN g % ${DEAD_EVERY} = 0 THEN 'dead' ELSE 'delivered' END,
  CASE WHEN g <= $1::int AND g % ${DEAD_EVERY} = 0 THEN 5 WHEN g > $1::int AND g <= $1::int + ${STUCK} THEN 1 ELSE 0 END,
  c.at, c.at,
  CASE WHEN g <= $1::int AND g % ${DEAD_EVERY} <> 0 THEN c.at + interval '40 milliseconds' END,
  CASE WHEN g <= $1::int AND g % ${DEAD_EVERY} = 0 THEN c.at + interval '1 second' END,
  CASE WHEN g <= $1::int AND g % ${DEAD_EVERY} = 0 THEN 'broker rejected the message: schema v' || (g % 7) || ' unknown' END,
  CASE WHEN g <= $1::int AND g % ${DEAD_EVERY} = 0 THEN c.at + interval '1 second'
    WHEN g > $1::int AND g <= $1::int + ${STUCK} THEN now() - interval '2 minutes' END,
  CASE WHEN g > $1::int AND g <= $1::int + ${STUCK} THEN 'crashed-instance' END,
  CASE WHEN g > $1::int AND g <= $1::int + ${STUCK} THEN gen_random_uuid() END,
  CASE WHEN g > $1::int AND g <= $1::int + ${STUCK} THEN now() - interval '1 minute' END
FROM generate_series($3::int, $4::int) AS g
CROSS JOIN LATERAL (SELECT now() - ($5::int - g) * interval '8640 microseconds' * (10000000.0 / $5::int) AS at) AS c
ORDER BY g`,
      [history, PENDING, from, to, ROWS],
    );
    log(
      `C1: ${to.toLocaleString('en-US')} rows (${((performance.now() - started) / 1000).toFixed(0)} s)`,
    );
  }
  // Parked rows wait behind a dead head of their own key, as the store parks them.
  await pg.query(
    `UPDATE ${t} SET message_key = 'k' || ((id % ${Math.floor(history / DEAD_EVERY)} + 1) * ${DEAD_EVERY} % ${KEYS}) WHERE status = 'waiting'`,
  );
  await ensureOutboxTable(pg, { tableName: TABLE });
  await pg.query(`VACUUM ANALYZE ${t}`);
  log(`C1: filled and indexed in ${((performance.now() - started) / 1000).toFixed(0)} s`);
}

/** Records the statements the console runs, with their parameters, for EXPLAIN. */
class StatementLog implements TypeOrmLogger {
  readonly seen = new Map<string, unknown[]>();
  logQuery(query: string, parameters?: unknown[]): void {
    if (query.includes(TABLE)) this.seen.set(query, parameters ?? []);
  }
  logQueryError(): void {}
  logQuerySlow(): void {}
  logSchemaBuild(): void {}
  logMigration(): void {}
  log(): void {}
}

async function startConsole(pg: DataSource): Promise<{ app: INestApplication; url: string }> {
  @Module({
    imports: [
      OutboxModule.forRoot({
        dataSource: pg,
        tableName: TABLE,
        publisher: new RecordingPublisher(),
        workers: false,
      }),
      OutboxConsoleModule.forRoot({ path: '/outbox', unsafeAllowAnonymous: true }),
    ],
  })
  class ConsoleBenchModule {}
  const app = await NestFactory.create(ConsoleBenchModule, { logger: ['error'] });
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  return { app, url: `${url}/outbox` };
}

async function timed(url: string, init?: RequestInit): Promise<{ ms: number; body: string }> {
  const start = performance.now();
  const res = await fetch(url, init);
  const body = await res.text();
  const ms = performance.now() - start;
  if (res.status !== 200) throw new Error(`${url} answered ${res.status}: ${body.slice(0, 300)}`);
  return { ms, body };
}

/** EXPLAIN ANALYZE of the statements a page ran; printed when one reads far more than it keeps. */
async function planned(
  pg: DataSource,
  label: string,
  seen: ReadonlyMap<string, unknown[]>,
  log: (line: string) => void,
): Promise<string[]> {
  const scans: string[] = [];
  for (const [sql, parameters] of seen) {
    // The console only reads the outbox table here, so running each statement again is safe.
    const rows = await pg.query<{ 'QUERY PLAN': string }[]>(`EXPLAIN ANALYZE ${sql}`, parameters);
    const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
    const discarded = Math.max(
      0,
      ...[...plan.matchAll(/Rows Removed by Filter: (\d+)/g)].map((m) => Number(m[1])),
    );
    // A scan of the table, or an index walk that throws most of what it reads away.
    if (new RegExp(`Seq Scan on "?${TABLE}"?`).test(plan) || discarded > 10_000) {
      scans.push(`${label}: ${sql.replace(/\s+/g, ' ').slice(0, 120)}`);
      log(`C1: ${label} reads the whole table:\n${sql}\n${JSON.stringify(parameters)}\n${plan}`);
    }
  }
  return scans;
}

export async function c1(ctx: BenchContext): Promise<ScenarioResult> {
  const { pg } = ctx;
  const result = newResult(
    'C1',
    `Console pages over ${ROWS.toLocaleString('en-US')} outbox rows (PostgreSQL, Express, ${REQUESTS} requests per page)`,
  );
  const t = performance.now();
  await fill(pg, ctx.log);
  result.values.c1_fill_s = Math.round((performance.now() - t) / 1000);
  const sizes = await pg.query<{ status: string; n: string }[]>(
    `SELECT status, count(*) AS n FROM "${TABLE}" GROUP BY status ORDER BY status`,
  );
  result.notes.push(
    `rows by status: ${sizes.map((s) => `${s.status} ${Number(s.n).toLocaleString('en-US')}`).join(', ')}; table ${await tableSize(pg)}`,
  );
  const [dead] = await pg.query<{ message_id: string; message_key: string }[]>(
    `SELECT message_id::text, message_key FROM "${TABLE}" WHERE status = 'dead' ORDER BY id LIMIT 1`,
  );
  const [parked] = await pg.query<{ message_id: string }[]>(
    `SELECT message_id::text FROM "${TABLE}" WHERE status = 'waiting' ORDER BY id DESC LIMIT 1`,
  );
  if (dead === undefined || parked === undefined)
    throw new Error('C1: the fill made no dead or parked row');

  const statements = new StatementLog();
  const consoleDb = await openPostgres({ poolSize: 10, logger: statements });
  const { app, url } = await startConsole(consoleDb);
  const scans: string[] = [];
  try {
    // Overview first, so that its slowest request is the first, on-demand backlog sample.
    const pages: [string, string][] = [
      ['overview', ''],
      ['dead letters', '/messages?status=dead'],
      ['dead letters, page 2', 'NEXT'],
      ['dead letters by topic', '/messages?status=dead&topic=topic-7'],
      ['dead letters by type', '/messages?status=dead&type=order.paid'],
      ['dead letters by key', `/messages?status=dead&key=${encodeURIComponent(dead.message_key)}`],
      ['dead letters by error text', '/messages?status=dead&error=schema+v3'],
      ['dead letters older than 1 h', '/messages?status=dead&olderThanMinutes=60'],
      [
        'dead letters, all filters',
        '/messages?status=dead&topic=topic-0&type=order.created&error=v2&olderThanMinutes=5',
      ],
      ['pending messages', '/messages?status=pending'],
      ['a dead letter', `/messages/${dead.message_id}`],
      ['why (parked message)', `/why?id=${parked.message_id}`],
      ['blocked keys', '/blocked-keys'],
      ['stuck leases', '/stuck-leases'],
      ['stuck leases > 1 min', '/stuck-leases?leasedLongerThanMinutes=1'],
      ['audit log', '/audit'],
      ['confirm purge by topic (count)', 'CONFIRM'],
    ];
    let next = '';
    let csrf = '';
    for (const [label, path] of pages) {
      statements.seen.clear();
      const times: number[] = [];
      for (let i = 0; i < REQUESTS; i++) {
        const res =
          path === 'CONFIRM'
            ? await timed(`${url}/actions/confirm`, {
                method: 'POST',
                headers: { 'content-type': 'application/x-www-form-urlencoded' },
                body: new URLSearchParams([
                  ['csrf', csrf],
                  ['action', 'purge'],
                  ['scope', 'filter'],
                  ['topic', 'topic-7'],
                ]).toString(),
              })
            : await timed(path === 'NEXT' ? next : `${url}${path}`);
        times.push(res.ms);
        if (label === 'dead letters') {
          const href = /id="next-page"\s+href="([^"]+)"/.exec(res.body)?.[1];
          if (href === undefined) throw new Error('C1: the dead letters have no next page');
          next = new URL(href.replace(/&amp;/g, '&'), url).toString();
          csrf = /name="csrf"\s+value="([^"]+)"/.exec(res.body)?.[1] ?? '';
        }
      }
      const sorted = [...times].sort((a, b) => a - b);
      const p50 = percentile(sorted, 50);
      const max = sorted[sorted.length - 1] ?? NaN;
      const key = label
        .replace(/[^a-z0-9]+/gi, '_')
        .replace(/_+$/, '')
        .toLowerCase();
      addMetric(result, `c1_${key}_ms`, label, 'ms', times);
      result.values[`c1_${key}_p50_ms`] = Math.round(p50 * 10) / 10;
      result.values[`c1_${key}_max_ms`] = Math.round(max * 10) / 10;
      addTarget(
        result,
        `c1_${key}_max`,
        `${label}: slowest of ${REQUESTS} (ms)`,
        max,
        '<=',
        TARGET_MS,
      );
      ctx.log(`C1: ${label}: p50 ${p50.toFixed(1)} ms, max ${max.toFixed(1)} ms`);
      scans.push(...(await planned(pg, label, statements.seen, ctx.log)));
    }
    // The backlog sampler's own statements, timed apart: they run in the background, every
    // sampleIntervalMs, and a page only waits for one when the last sample is too old.
    const admin = app.get(OutboxAdmin);
    const sample: number[] = [];
    statements.seen.clear();
    for (let i = 0; i < 5; i++) {
      const start = performance.now();
      await new BacklogSampler(admin, 0).latest();
      sample.push(performance.now() - start);
    }
    addMetric(
      result,
      'c1_backlog_sample_ms',
      'backlog sample (background, every 10 s)',
      'ms',
      sample,
    );
    scans.push(...(await planned(pg, 'backlog sample', statements.seen, ctx.log)));
    result.values.c1_statements_scanning_table = scans.length;
    if (scans.length > 0)
      result.notes.push(`statements reading the whole table: ${scans.join(' | ')}`);
  } finally {
    await app.close();
    await closeDataSource(consoleDb);
    // BENCH_C1_KEEP=1 leaves the table for a look with psql (drop it yourself afterwards).
    if (process.env.BENCH_C1_KEEP === '1') ctx.log(`C1: kept table ${TABLE}`);
    else await dropOutboxTable(pg, TABLE);
  }
  return result;
}

async function tableSize(pg: DataSource): Promise<string> {
  const [row] = await pg.query<{ size: string }[]>(
    `SELECT pg_size_pretty(pg_total_relation_size($1)) AS size`,
    [TABLE],
  );
  return row?.size ?? '?';
}
