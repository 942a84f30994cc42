import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { connect, type ChannelModel, type ConsumeMessage } from 'amqplib';
import type { DataSource } from 'typeorm';
import type { OutboxPublisher, OutboxRecord, PublishOutcome } from '../../lib';
import { OutboxAuditStore } from '../../lib/admin';
import {
  OUTBOX_ERASURE_NOTICE_TYPE,
  OUTBOX_HEADER_SUBJECT_KEY,
  OutboxSealedDataError,
  OutboxSubjectErasedError,
  PersonalDataReader,
  erasureNoticeOf,
  subjectKeys,
} from '../../lib/erasure';
import { OUTBOX_SQL } from '../../lib/outbox.constants';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { ensureOutboxArchiveTable } from '../../lib/schema';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { uniqueTable } from '../support/databases';
import { ageRows } from '../support/db-clock';
import { useOutboxScope } from '../support/outbox-scope';
import { describeSource, SOURCE_CASES, useSource } from '../support/sources';
import { RABBITMQ_URL } from '../support/transports/native-consumers';
import { waitFor } from '../support/wait-for';

// Per-subject erasure by crypto-shredding (docs/erasure.md), on each database with RabbitMQ:
// personal data of two subjects is sealed at enqueue, delivered, archived and re-driven; one
// subject is erased. Nothing of the erased subject's plaintext is in any table's bytes or the
// broker's copies, the other subject still opens, each key's erasure notice comes after the
// erased subject's last message on it, and the reader fails closed on an erased message.

const MINUTE = 60_000;
const ALICE = { email: 'alice.liddell@example.org', name: 'Alice Liddell' };
const BOB = { email: 'bob.brown@example.org', name: 'Bob Brown' };

/** Fails the first publish of the messages of `type`, so the attempt history has rows. */
class FailingFirst implements OutboxPublisher {
  private readonly failed = new Set<string>();
  constructor(
    private readonly inner: OutboxPublisher,
    private readonly type: string,
  ) {}
  async publish(
    messages: readonly OutboxRecord[],
    signal: AbortSignal,
  ): Promise<readonly PublishOutcome[]> {
    const pass = messages.filter((m) => m.type !== this.type || this.failed.has(m.messageId));
    const outcomes = new Map<string, PublishOutcome>();
    const sent = await this.inner.publish(pass, signal);
    pass.forEach((m, i) => outcomes.set(m.messageId, sent[i] as PublishOutcome));
    return messages.map((m) => {
      const outcome = outcomes.get(m.messageId);
      if (outcome !== undefined) return outcome;
      this.failed.add(m.messageId);
      return {
        ok: false,
        error: new Error(`first attempt of ${m.type} refused by the test`),
      };
    });
  }
  close(): Promise<void> {
    return this.inner.close?.() ?? Promise.resolve();
  }
}

/** Every table named after `prefix` (and `extra`), each row's values as the database stores them, as bytes. */
async function tableBytes(
  ds: DataSource,
  prefix: string,
  extra: readonly string[],
): Promise<Buffer> {
  const type = ds.options.type;
  let names: string[];
  if (type === 'postgres') {
    const rows = await ds.query<{ n: string }[]>(
      `SELECT table_name AS n FROM information_schema.tables WHERE table_schema = current_schema() AND (table_name LIKE $1 OR table_name = ANY($2))`,
      [`${prefix}%`, extra],
    );
    names = rows.map((r) => r.n);
  } else if (type === 'better-sqlite3') {
    const rows = await ds.query<{ n: string }[]>(
      `SELECT name AS n FROM sqlite_master WHERE type = 'table' AND (name LIKE ? OR name IN (${extra.map(() => '?').join(', ')}))`,
      [`${prefix}%`, ...extra],
    );
    names = rows.map((r) => r.n);
  } else {
    const rows = await ds.query<{ n: string }[]>(
      `SELECT table_name AS n FROM information_schema.tables WHERE table_schema = DATABASE() AND (table_name LIKE ? OR table_name IN (${extra.map(() => '?').join(', ')}))`,
      [`${prefix}%`, ...extra],
    );
    names = rows.map((r) => r.n);
  }
  expect(names.length).toBeGreaterThanOrEqual(6);
  const parts: Buffer[] = [];
  for (const name of names) {
    const quoted = ds.driver.escape(name);
    // PostgreSQL: each row in its text form (bytea as hex, so its bytes are decoded below too).
    const rows: Record<string, unknown>[] =
      type === 'postgres'
        ? await ds.query(`SELECT t::text AS row FROM ${quoted} AS t`)
        : await ds.query(`SELECT * FROM ${quoted}`);
    for (const row of rows) {
      for (const value of Object.values(row)) {
        if (Buffer.isBuffer(value)) parts.push(value);
        else if (value instanceof Uint8Array) parts.push(Buffer.from(value));
        else
          parts.push(
            Buffer.from(typeof value === 'string' ? value : (JSON.stringify(value) ?? ''), 'utf8'),
          );
        // bytea's hex text holds bytes too: decode every \x… run.
        if (typeof value === 'string') {
          for (const hex of value.match(/\\\\x([0-9a-f]+)/g) ?? [])
            parts.push(Buffer.from(hex.slice(3), 'hex'));
        }
      }
    }
  }
  return Buffer.concat(parts);
}

/** The SQLite database file and its WAL, as they are on disk. */
function sqliteFileBytes(ds: DataSource): Buffer {
  const file = String(ds.options.database);
  const dir = dirname(file);
  return Buffer.concat(
    readdirSync(dir)
      .filter((f) => f.startsWith('test.sqlite'))
      .map((f) => readFileSync(join(dir, f))),
  );
}

function expectNoPlaintext(
  bytes: Buffer,
  who: { email: string; name: string },
  where: string,
): void {
  for (const text of [who.email, who.name]) {
    expect({ where, found: bytes.includes(Buffer.from(text, 'utf8')) }).toEqual({
      where,
      found: false,
    });
  }
}

for (const source of SOURCE_CASES) {
  describeSource(
    source,
    'per-subject erasure',
    () => {
      const scope = useOutboxScope(source.db, { tablePrefix: 'outbox_er' });
      const src = useSource(scope, source);
      let amqp: ChannelModel | undefined;

      beforeAll(async () => {
        amqp = await connect(RABBITMQ_URL);
      });
      afterAll(async () => {
        await amqp?.close().catch(() => undefined);
      });

      it('seals personal data everywhere, erases one subject for good, notices each key after its last message, and fails closed on it', async () => {
        const masterKey = randomBytes(32);
        const table = await scope.table('outbox_er');
        await ensureOutboxArchiveTable(scope.ds, { tableName: table });
        const quote = (name: string): string => scope.ds.driver.escape(name);
        scope.defer(async () => {
          await scope.ds.query(`DROP TABLE IF EXISTS ${quote(`${table}_subject_uses`)}`);
          await scope.ds.query(`DROP TABLE IF EXISTS ${quote(`${table}_subject_keys`)}`);
          await scope.ds.query(`DROP TABLE IF EXISTS ${quote(`${table}_claim_checks`)}`);
        });
        const queue = uniqueTable('outbox_er_q');
        const rabbit = new RabbitMqPublisher({
          url: RABBITMQ_URL,
          assertTopology: async (channel) => {
            await channel.assertQueue(queue, { durable: true });
          },
        });
        const h = await src.dispatcherApp(table, new FailingFirst(rabbit, 'user.flaky'), {
          erasure: { masterKey },
          cleaner: { archive: true, deliveredRetentionMs: MINUTE },
          retry: { initialDelayMs: 0, maxDelayMs: 0, jitter: 0 },
        });
        const audit = new OutboxAuditStore(h.moduleRef.get<SqlPort>(OUTBOX_SQL), {
          tableName: uniqueTable('outbox_er_aud'),
        });
        await audit.ensure();
        scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS ${audit.names.table}`));

        const channel = await amqp!.createChannel();
        scope.defer(async () => {
          await channel.deleteQueue(queue).catch(() => undefined);
          await channel.close().catch(() => undefined);
        });
        await channel.assertQueue(queue, { durable: true });
        const received: ConsumeMessage[] = [];
        await channel.consume(queue, (m) => {
          if (m === null) return;
          received.push(m);
          channel.ack(m);
        });

        // Alice's fields on k1 and k2, Bob's whole payload on k1, Alice's again on k3 through a
        // first attempt that fails (the attempt history), and one message with nothing personal.
        const ids = await h.commit([
          {
            topic: queue,
            key: 'k1',
            type: 'user.registered',
            payload: { userId: 'u-alice', ...ALICE },
            personal: { subject: 'u-alice', fields: ['email', 'name'] },
          },
          {
            topic: queue,
            key: 'k1',
            type: 'user.registered',
            payload: { userId: 'u-bob', ...BOB },
            personal: { subject: 'u-bob' },
          },
          {
            topic: queue,
            key: 'k2',
            type: 'user.renamed',
            payload: { userId: 'u-alice', ...ALICE },
            personal: { subject: 'u-alice', fields: ['email', 'name'] },
          },
          {
            topic: queue,
            key: 'k1',
            type: 'user.renamed',
            payload: { userId: 'u-alice', ...ALICE },
            personal: { subject: 'u-alice', fields: ['email', 'name'] },
          },
          {
            topic: queue,
            key: 'k3',
            type: 'user.flaky',
            payload: { userId: 'u-alice', ...ALICE },
            personal: { subject: 'u-alice', fields: ['email', 'name'] },
          },
          { topic: queue, key: 'k2', type: 'order.placed', payload: { orderId: 'o-1' } },
        ]);
        await src.deliver(h, 'every message delivered', async () =>
          (await h.rows()).every((r) => r.status === 'delivered'),
        );
        await waitFor('six messages consumed', () => received.length === 6);

        // The attempt history holds the failed first attempt (the cleaner's archive deletes it
        // later): no plaintext there either.
        const attempts = await scope.ds.query<unknown[]>(
          `SELECT * FROM ${quote(`${table}_attempts`)}`,
        );
        expect(attempts.length).toBeGreaterThan(0);
        expectNoPlaintext(
          await tableBytes(scope.ds, table, [audit.names.tableName]),
          ALICE,
          'tables before the archive',
        );

        // Archived, then re-driven from the archive (copies of sealed messages stay sealed).
        await ageRows(scope.ds, h.table, 'delivered', 120);
        expect((await h.cleaner.runOnce()).delivered).toBe(6);
        const redrive = await h.admin.redrive(
          { key: 'k1' },
          { actor: 'test', reason: 'replay k1', auditTable: { tableName: audit.names.tableName } },
        );
        expect(redrive.count).toBe(3);
        await src.deliver(h, 'the copies delivered', async () => {
          const rows = await h.rows();
          return rows.length === 3 && rows.every((r) => r.status === 'delivered');
        });
        await waitFor('nine messages consumed', () => received.length === 9);

        const erasure = await h.admin.erase('u-alice', {
          actor: 'dpo@example.org',
          reason: 'GDPR art. 17 request #42',
          auditTable: { tableName: audit.names.tableName },
        });
        expect(erasure).toEqual({ erased: true, keyId: expect.any(String), notices: 3 });
        await src.deliver(h, 'the notices delivered', async () => {
          const rows = await h.rows();
          return rows.length === 6 && rows.every((r) => r.status === 'delivered');
        });
        await waitFor('twelve messages consumed', () => received.length === 12);
        // Erasing again finds no live key, and is recorded all the same.
        expect(
          await h.admin.erase('u-alice', {
            actor: 'dpo@example.org',
            reason: 'again',
            auditTable: { tableName: audit.names.tableName },
          }),
        ).toEqual({ erased: false, keyId: null, notices: 0 });
        const erasures = await audit.recent(10, 'erase');
        expect(erasures).toHaveLength(2);
        expect(erasures.map((e) => e.target).join('\n')).not.toContain('u-alice');

        // No plaintext of either subject in any table (outbox, archive, attempt history, keys,
        // uses, audit), nor in the broker's copies; the attempt history has a row.
        const bytes = await tableBytes(scope.ds, table, [audit.names.tableName]);
        expect(bytes.includes(Buffer.from('o-1'))).toBe(true);
        expectNoPlaintext(bytes, ALICE, 'tables');
        expectNoPlaintext(bytes, BOB, 'tables');
        if (source.db.name === 'sqlite')
          expectNoPlaintext(sqliteFileBytes(scope.ds), ALICE, 'SQLite file');
        const broker = Buffer.concat(
          received.flatMap((m) => [
            m.content,
            Buffer.from(JSON.stringify(m.properties.headers ?? {})),
          ]),
        );
        expectNoPlaintext(broker, ALICE, 'broker copies');
        expectNoPlaintext(broker, BOB, 'broker copies');

        // The consumer: Bob opens, Alice fails closed, the unsealed message is as it was.
        const reader = new PersonalDataReader(
          subjectKeys({ dataSource: scope.ds, tableName: table, masterKey }),
        );
        const message = (m: ConsumeMessage) => ({
          headers: m.properties.headers,
          payload: m.content,
        });
        const byType = (m: ConsumeMessage): string =>
          String(m.properties.type ?? m.properties.headers?.['x-outbox-type']);
        const keyOf = (m: ConsumeMessage): string => String(m.properties.headers?.['x-outbox-key']);
        // Bob's whole payload is sealed: his messages are those under the other data key.
        const keyIdOf = (m: ConsumeMessage): unknown =>
          m.properties.headers?.[OUTBOX_HEADER_SUBJECT_KEY];
        const bobs = received.filter(
          (m) => keyIdOf(m) !== undefined && keyIdOf(m) !== erasure.keyId,
        );
        expect(bobs).toHaveLength(2);
        for (const m of bobs)
          expect(await reader.open(message(m))).toEqual({ userId: 'u-bob', ...BOB });
        const alices = received.filter(
          (m) =>
            m.properties.headers?.[OUTBOX_HEADER_SUBJECT_KEY] === erasure.keyId &&
            byType(m) !== OUTBOX_ERASURE_NOTICE_TYPE,
        );
        expect(alices).toHaveLength(6);
        for (const m of alices) {
          expect(JSON.parse(String(m.content))).toMatchObject({
            userId: 'u-alice',
            email: { $outboxSealed: expect.any(String) },
          });
          await expect(reader.open(message(m))).rejects.toBeInstanceOf(OutboxSubjectErasedError);
        }
        const plain = received.find((m) => String(m.content).includes('o-1'))!;
        expect(await reader.open(message(plain))).toEqual({ orderId: 'o-1' });
        // A sealed value moved to another field does not open.
        const moved = JSON.parse(String(bobs[0]!.content)) as Record<string, unknown>;
        await expect(
          reader.open({
            headers: bobs[0]!.properties.headers,
            payload: { renamed: moved },
          }),
        ).rejects.toBeInstanceOf(OutboxSealedDataError);

        // Each key that carried Alice: its notice after her last message there.
        const notices = received.filter(
          (m) => erasureNoticeOf({ ...message(m), type: byType(m) }) !== null,
        );
        expect(notices.map(keyOf).sort()).toEqual(['k1', 'k2', 'k3']);
        for (const notice of notices) {
          expect(erasureNoticeOf({ ...message(notice), type: byType(notice) })?.keyId).toBe(
            erasure.keyId,
          );
          const onKey = received.filter((m) => keyOf(m) === keyOf(notice));
          const lastAlice = Math.max(...onKey.map((m, i) => (alices.includes(m) ? i : -1)));
          expect(onKey.indexOf(notice)).toBeGreaterThan(lastAlice);
        }
        expect(ids).toHaveLength(6);
      });

      it('refuses personal data without the erasure option, and writes nothing of a rolled-back enqueue', async () => {
        const table = await scope.table('outbox_er');
        const quote = (name: string): string => scope.ds.driver.escape(name);
        scope.defer(async () => {
          await scope.ds.query(`DROP TABLE IF EXISTS ${quote(`${table}_subject_uses`)}`);
          await scope.ds.query(`DROP TABLE IF EXISTS ${quote(`${table}_subject_keys`)}`);
          await scope.ds.query(`DROP TABLE IF EXISTS ${quote(`${table}_claim_checks`)}`);
        });
        const { RecordingPublisher } = await import('../support/recording.publisher');
        const plain = await src.dispatcherApp(table, new RecordingPublisher());
        await expect(
          plain.commit([{ topic: 'users', payload: ALICE, personal: { subject: 'u-alice' } }]),
        ).rejects.toThrow(/erasure option/);
        await plain.close();
        const h = await src.dispatcherApp(table, new RecordingPublisher(), {
          erasure: { masterKey: randomBytes(32).toString('base64') },
        });
        await expect(
          scope.ds.transaction(async (manager) => {
            await h.outbox.enqueue(
              { topic: 'users', key: 'k1', payload: ALICE, personal: { subject: 'u-carol' } },
              manager,
            );
            throw new Error('rolled back');
          }),
        ).rejects.toThrow('rolled back');
        const keys = await scope.ds.query<unknown[]>(
          `SELECT * FROM ${quote(`${table}_subject_keys`)}`,
        );
        const uses = await scope.ds.query<unknown[]>(
          `SELECT * FROM ${quote(`${table}_subject_uses`)}`,
        );
        expect([keys.length, uses.length]).toEqual([0, 0]);
        expect(await h.rows()).toEqual([]);
      });
    },
    ['rabbitmq'],
  );
}
