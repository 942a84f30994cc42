/**
 * P3: the same backlog drain on the other dialects: MariaDB → RabbitMQ (RabbitMqPublisher) and
 * SQLite → Nest TCP transport (ClientProxyPublisher, consumer in another process), with the
 * ratio of each to P1's PostgreSQL figure (measured here again, in the same run).
 */
import { ClientTCP } from '@nestjs/microservices';
import type { DataSource } from 'typeorm';
import { ClientProxyPublisher } from '../../lib/publishers/microservices';
import { forkTs } from '../support/child';
import { SERVICES, named } from '../support/config';
import {
  analyse,
  closeDataSource,
  dropOutboxTable,
  ensureMariaDatabase,
  openMaria,
  openSqlite,
  resetOutboxTable,
  seedOutbox,
  truncateOutbox,
} from '../support/databases';
import {
  drainAll,
  measured,
  rabbitPublisher,
  startOutboxApp,
  type OutboxApp,
} from '../support/outbox-app';
import { purgeQueue, readAndCheck, resetQueue } from '../support/rabbit';
import { addMetric, newResult, type BenchContext, type ScenarioResult } from '../support/report';
import { ratio, round } from '../support/stats';
import { sleep } from '../../test/support/wait-for';

const TABLE = named('bench_p3');
const QUEUE = named('bench.p3', '.');

async function timedDrain(
  app: OutboxApp,
  ds: DataSource,
  n: number,
  log: (line: string) => void = () => undefined,
): Promise<number> {
  return measured(
    `P3 ${ds.options.type}`,
    log,
    async () => {
      await truncateOutbox(ds, TABLE);
      await seedOutbox(ds, TABLE, n);
      await analyse(ds, TABLE);
      const t = performance.now();
      await drainAll(app, ds, TABLE);
      return n / ((performance.now() - t) / 1000);
    },
    [app],
  );
}

export async function p3(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile, rabbit, pg } = ctx;
  const n = profile.p3Messages;
  const result = newResult(
    'P3',
    `Other databases: drain ${n.toLocaleString('en-US')} msgs, ordering on, 1 000 keys`,
  );
  const rates = { postgres: [] as number[], mariadb: [] as number[], sqlite: [] as number[] };
  let mariaProblems = 0;

  // PostgreSQL → RabbitMQ at this size, as the reference.
  await resetQueue(rabbit, QUEUE);
  await resetOutboxTable(pg, TABLE);
  const pgApp = await startOutboxApp({
    dataSource: pg,
    tableName: TABLE,
    publisher: rabbitPublisher(QUEUE),
    autoStart: false,
    instanceId: 'bench-p3-pg',
  });
  let maria: DataSource | undefined;
  let mariaApp: OutboxApp | undefined;
  try {
    await ensureMariaDatabase();
    maria = await openMaria();
    await resetOutboxTable(maria, TABLE);
    mariaApp = await startOutboxApp({
      dataSource: maria,
      tableName: TABLE,
      publisher: rabbitPublisher(QUEUE),
      autoStart: false,
      instanceId: 'bench-p3-maria',
    });
  } catch (error) {
    result.skipped.push(`MariaDB: ${error instanceof Error ? error.message : String(error)}`);
  }
  try {
    await timedDrain(pgApp, pg, 1_000);
    if (mariaApp !== undefined && maria !== undefined) await timedDrain(mariaApp, maria, 1_000);
    for (let run = 1; run <= ctx.runs; run++) {
      await purgeQueue(rabbit, QUEUE);
      const r = await timedDrain(pgApp, pg, n, ctx.log);
      rates.postgres.push(r);
      if (mariaApp !== undefined && maria !== undefined) {
        await purgeQueue(rabbit, QUEUE);
        const m = await timedDrain(mariaApp, maria, n, ctx.log);
        rates.mariadb.push(m);
        const check = await readAndCheck(QUEUE, n);
        mariaProblems += check.duplicates + check.orderViolations + check.missing;
        ctx.log(
          `P3 run ${run}: PostgreSQL ${Math.round(r)} msgs/s, MariaDB ${Math.round(m)} msgs/s (dup ${check.duplicates}, order ${check.orderViolations}, missing ${check.missing})`,
        );
      }
    }
  } finally {
    await pgApp.close();
    await mariaApp?.close();
    if (maria !== undefined) {
      await dropOutboxTable(maria, TABLE).catch(() => undefined);
      await closeDataSource(maria);
    }
    await dropOutboxTable(pg, TABLE);
    await rabbit.deleteQueue(QUEUE);
  }

  // SQLite → Nest TCP transport.
  const consumer = forkTs('../support/tcp-consumer-process.ts', {
    port: SERVICES.tcp.port,
    pattern: 'bench',
  });
  const sqlite = await openSqlite();
  const client = new ClientTCP({ host: SERVICES.tcp.host, port: SERVICES.tcp.port });
  let sqliteApp: OutboxApp | undefined;
  let sqliteLost = 0;
  try {
    await consumer.next('ready', 60_000);
    await resetOutboxTable(sqlite, TABLE);
    sqliteApp = await startOutboxApp({
      dataSource: sqlite,
      tableName: TABLE,
      publisher: new ClientProxyPublisher(client),
      autoStart: false,
      instanceId: 'bench-p3-sqlite',
    });
    await timedDrain(sqliteApp, sqlite, 1_000);
    for (let run = 1; run <= ctx.runs; run++) {
      await countAt(consumer, true);
      const r = await timedDrain(sqliteApp, sqlite, n, ctx.log);
      rates.sqlite.push(r);
      let got = 0;
      for (let i = 0; i < 100 && got < n; i++) {
        got = await countAt(consumer, false);
        if (got < n) await sleep(50);
      }
      sqliteLost += Math.max(0, n - got);
      ctx.log(`P3 run ${run}: SQLite → TCP ${Math.round(r)} msgs/s (consumer got ${got})`);
    }
  } catch (error) {
    result.skipped.push(`SQLite → TCP: ${error instanceof Error ? error.message : String(error)}`);
  } finally {
    await sqliteApp?.close();
    client.close();
    await closeDataSource(sqlite);
    consumer.send({ type: 'exit' });
    await consumer.exit();
  }

  const pgRate = addMetric(
    result,
    'postgres_msgs_per_s',
    'PostgreSQL → RabbitMQ (reference, same size)',
    'msgs/s',
    rates.postgres,
    n,
  );
  if (rates.mariadb.length > 0) {
    const m = addMetric(
      result,
      'mariadb_msgs_per_s',
      'MariaDB → RabbitMQ',
      'msgs/s',
      rates.mariadb,
      n,
    );
    result.values.p3_mariadb_vs_pg = round(ratio(m.median, pgRate.median), 3);
    result.values.p3_mariadb_delivery_problems = mariaProblems;
  }
  if (rates.sqlite.length > 0) {
    const s = addMetric(
      result,
      'sqlite_tcp_msgs_per_s',
      'SQLite → Nest TCP transport',
      'msgs/s',
      rates.sqlite,
      n,
    );
    result.values.p3_sqlite_vs_pg = round(ratio(s.median, pgRate.median), 3);
    result.values.p3_sqlite_not_received = sqliteLost;
  }
  result.notes.push('TCP gives no acknowledgement: "published" there means written to the socket.');
  return result;
}

async function countAt(consumer: ReturnType<typeof forkTs>, reset: boolean): Promise<number> {
  consumer.send({ type: 'count', reset });
  return Number((await consumer.next('count')).received);
}
