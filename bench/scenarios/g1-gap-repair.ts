/**
 * G1: what gap repair costs (docs/gap-repair.md), beside the same work without it, on PostgreSQL
 * and MariaDB. At the consumer, when nothing is lost: `Inbox.handleOnce` of keyed messages in
 * order under `onGap: 'hold'`, the inbox with `sequence.repair` against the same inbox without,
 * in paired blocks (the repair's bookkeeping of the deliveries held; no request is ever made, and
 * a request would fail the scenario). At the producer, per request: `gapRepairer().answer()`
 * re-sending one delivered message (read of the key's rows and archive by number, the copy and
 * its audit entry in one transaction) against `OutboxAdmin.redrive()` of one delivered message
 * by key (the operator's audited re-drive of the same message). A figure to choose by, not a
 * target.
 */
import type { DataSource } from 'typeorm';
import { OutboxAdmin } from '../../lib';
import { OutboxAuditStore } from '../../lib/admin';
import { ensureInboxTable, Inbox, inboxTableDropDdl, type GapRepairRequest } from '../../lib/inbox';
import { OUTBOX_SQL } from '../../lib/outbox.constants';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { outboxDialectOf } from '../../lib/store/schema/outbox-table-ddl';
import { named } from '../support/config';
import {
  dialectOf,
  dropOutboxTable,
  onPostgresAndMaria,
  quoteTable,
  resetOutboxTable,
} from '../support/databases';
import { startOutboxApp } from '../support/outbox-app';
import { pairedBlocks } from '../support/paired-blocks';
import { addMetric, newResult, type BenchContext, type ScenarioResult } from '../support/report';
import { round, summarise } from '../support/stats';

const TABLE = named('bench_g1');
const INBOX = named('bench_g1_inbox');
const AUDIT = named('bench_g1_audit');
const BLOCK = 20;
const KEYS = 16;
const TOPIC = 'orders';

export async function g1(ctx: BenchContext): Promise<ScenarioResult> {
  const result = newResult(
    'G1',
    'Gap repair: inbox hold with repair vs without (nothing lost); answering a request vs a manual re-drive of one message',
  );
  await onPostgresAndMaria(ctx.pg, async (db) => {
    await consumerCost(ctx, result, db);
    await producerCost(ctx, result, db);
  });
  return result;
}

async function consumerCost(ctx: BenchContext, result: ScenarioResult, db: DataSource) {
  const label = dialectOf(db);
  await ensureInboxTable(db, { tableName: INBOX });
  const asked: GapRepairRequest[] = [];
  const repaired = new Inbox(db, {
    tableName: INBOX,
    sequence: {
      onGap: 'hold',
      repair: {
        client: {
          request: (request) => {
            asked.push(request);
            return Promise.reject(new Error('G1: nothing was lost, nothing may be asked'));
          },
        },
        topic: TOPIC,
      },
    },
  });
  const plain = new Inbox(db, { tableName: INBOX, sequence: { onGap: 'hold' } });
  const n = Math.max(BLOCK * 2, Math.round(ctx.profile.p5Transactions / 2));
  const on: number[] = [];
  const off: number[] = [];
  const ratio: number[] = [];
  try {
    for (let run = 1; run <= ctx.runs; run++) {
      const next = (inbox: Inbox, consumer: string) => {
        const numbers = new Map<string, number>();
        let i = 0;
        return async (): Promise<void> => {
          const key = `k${i++ % KEYS}`;
          const sequence = (numbers.get(key) ?? 0) + 1;
          numbers.set(key, sequence);
          await inbox.handleOnce(
            db,
            { consumer, messageId: `${consumer}-${key}-${sequence}`, sequence: { key, sequence } },
            () => Promise.resolve(),
          );
        };
      };
      const times = await pairedBlocks(
        next(repaired, `repair-${run}`),
        next(plain, `plain-${run}`),
        n,
        BLOCK,
      );
      on.push(times.first * 1000);
      off.push(times.second * 1000);
      ratio.push(times.ratio);
      ctx.log(
        `G1 ${label} run ${run}: handleOnce with repair ${(times.first * 1000).toFixed(0)} vs without ${(times.second * 1000).toFixed(0)} µs (×${times.ratio.toFixed(3)})`,
      );
    }
  } finally {
    for (const sql of inboxTableDropDdl(outboxDialectOf(db.options.type), { tableName: INBOX })) {
      await db.query(sql);
    }
  }
  if (asked.length > 0) throw new Error(`G1: ${asked.length} repair requests with nothing lost`);
  addMetric(
    result,
    `${label}_inbox_repair_us`,
    `${label}: handleOnce, hold + repair: µs`,
    'µs',
    on,
    n,
  );
  addMetric(result, `${label}_inbox_plain_us`, `${label}: handleOnce, hold only: µs`, 'µs', off, n);
  result.values[`g1_${label}_inbox_repair_vs_plain`] = round(summarise(ratio).median, 3);
}

async function producerCost(ctx: BenchContext, result: ScenarioResult, db: DataSource) {
  const label = dialectOf(db);
  await resetOutboxTable(db, TABLE);
  const app = await startOutboxApp({
    dataSource: db,
    tableName: TABLE,
    workers: false,
    ordering: { sequence: true },
  });
  const audit = new OutboxAuditStore(app.app.get<SqlPort>(OUTBOX_SQL), { tableName: AUDIT });
  await audit.ensure();
  const admin = app.app.get(OutboxAdmin);
  const auditTable = { tableName: AUDIT };
  const repairer = admin.gapRepairer({ auditTable, ratePerSecond: 1e5, burst: 1e5 });
  const n = Math.max(BLOCK * 2, Math.round(ctx.profile.p5Transactions / 8));
  const on: number[] = [];
  const off: number[] = [];
  const ratio: number[] = [];
  try {
    for (let run = 1; run <= ctx.runs; run++) {
      // One delivered message per key, a key per call (pairedBlocks' warm-up included).
      const calls = n + BLOCK * 2 + Math.min(BLOCK, 20);
      const keys = (variant: string) =>
        Array.from({ length: calls }, (_, i) => `${variant}-${run}-${i}`);
      const repairKeys = keys('repair');
      const redriveKeys = keys('redrive');
      const all = [...repairKeys, ...redriveKeys];
      for (let start = 0; start < all.length; start += 500) {
        await db.transaction((m) =>
          app.outbox.enqueue(
            all.slice(start, start + 500).map((key) => ({
              topic: TOPIC,
              key,
              type: 'order.changed',
              payload: { key },
            })),
            m,
          ),
        );
      }
      await db.query(
        `UPDATE ${quoteTable(db, TABLE)} SET status = 'delivered', delivered_at = created_at WHERE status = 'pending'`,
      );
      let r = 0;
      let d = 0;
      const times = await pairedBlocks(
        async () => {
          const key = repairKeys[r++] as string;
          const answer = await repairer.answer({
            topic: TOPIC,
            key,
            sequences: [1],
            consumer: 'g1',
          });
          if (answer.resent.length !== 1) throw new Error(`G1: ${key} was not re-sent`);
        },
        async () => {
          const key = redriveKeys[d++] as string;
          const report = await admin.redrive(
            { topic: TOPIC, key },
            { actor: 'g1', reason: 'G1 baseline', auditTable },
          );
          if (report.count !== 1) throw new Error(`G1: ${key} was not re-driven`);
        },
        n,
        BLOCK,
      );
      on.push(times.first * 1000);
      off.push(times.second * 1000);
      ratio.push(times.ratio);
      ctx.log(
        `G1 ${label} run ${run}: gap-repair answer ${(times.first * 1000).toFixed(0)} vs re-drive ${(times.second * 1000).toFixed(0)} µs (×${times.ratio.toFixed(3)})`,
      );
    }
  } finally {
    await app.close();
    await db.query(`DROP TABLE IF EXISTS ${quoteTable(db, AUDIT)}`);
    await dropOutboxTable(db, TABLE);
  }
  addMetric(
    result,
    `${label}_answer_us`,
    `${label}: answer re-sending one message: µs`,
    'µs',
    on,
    n,
  );
  addMetric(
    result,
    `${label}_redrive_us`,
    `${label}: re-drive of one message by key: µs`,
    'µs',
    off,
    n,
  );
  result.values[`g1_${label}_answer_vs_redrive`] = round(summarise(ratio).median, 3);
}
