import { randomBytes } from 'node:crypto';
import type { DataSource, EntityManager } from 'typeorm';
import { OutboxAuditStore } from '../../lib/admin';
import {
  OUTBOX_ERASURE_NOTICE_TYPE,
  OUTBOX_HEADER_SUBJECT_KEY,
  OutboxSubjectErasedError,
  PersonalDataReader,
  subjectKeys,
} from '../../lib/erasure';
import { masterKeyWrapper, type OutboxKeyWrapper } from '../../lib/message/erasure/key-wrapper';
import { OUTBOX_SQL } from '../../lib/outbox.constants';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { TEST_DATABASES, uniqueTable, type OutboxRow } from '../support/databases';
import type { OutboxApp } from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';
import { waitFor } from '../support/wait-for';

// Erasing a subject while a transaction enqueues its personal data (docs/erasure.md, "Erase a
// subject"). Whatever the interleaving, a message of the subject is either sealed under the key
// the erasure destroys, with the erasure notice after it on its key, or written after the
// erasure under a new key (its enqueue waited for the erasure); never under a key that outlives
// an erasure it was written before, never with the notice ahead of it. Each interleaving is
// forced by holding one transaction open and seeing the other wait on the database's locks.

const EMAIL = 'ada.lovelace@example.org';

/** A transaction held open after `work` until `commit()` or `rollback()`. */
interface HeldTransaction<T> {
  /** Resolves once `work` has run (its locks are held). */
  readonly ready: Promise<T>;
  /** Resolves (or rejects) once the transaction has ended. */
  readonly ended: Promise<T>;
  commit(): void;
  rollback(): void;
}

function holdTransaction<T>(
  ds: DataSource,
  work: (manager: EntityManager) => Promise<T>,
  isolation: 'READ COMMITTED' | 'REPEATABLE READ' | undefined,
): HeldTransaction<T> {
  let release!: (commit: boolean) => void;
  const gate = new Promise<boolean>((resolve) => (release = resolve));
  let started!: (value: T) => void;
  let failed!: (error: unknown) => void;
  const ready = new Promise<T>((resolve, reject) => {
    started = resolve;
    failed = reject;
  });
  const body = async (manager: EntityManager): Promise<T> => {
    let value: T;
    try {
      value = await work(manager);
    } catch (error) {
      failed(error);
      throw error;
    }
    started(value);
    if (!(await gate)) throw new Error('rolled back by the test');
    return value;
  };
  const ended = isolation === undefined ? ds.transaction(body) : ds.transaction(isolation, body);
  // A transaction can fail before the test awaits either promise (the erasure it waited for
  // commits while the test is still awaiting another); the test asserts both later.
  ready.catch(() => undefined);
  ended.catch(() => undefined);
  return { ready, ended, commit: () => release(true), rollback: () => release(false) };
}

/** How many statements naming `table` wait for a lock another transaction holds. */
async function waiting(ds: DataSource, table: string): Promise<number> {
  const like = `%${table}%`;
  if (ds.options.type === 'postgres') {
    const rows = await ds.query<{ n: number }[]>(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1 AND pid <> pg_backend_pid()`,
      [like],
    );
    return Number(rows[0]?.n);
  }
  // MariaDB's lock wait of a locking read on a unique index happens while the statement is
  // optimised, before InnoDB lists the transaction as waiting: a statement on these tables
  // (a few rows) still running after 200 ms is waiting.
  const rows = await ds.query<{ n: number }[]>(
    `SELECT count(*) AS n FROM information_schema.PROCESSLIST WHERE COMMAND IN ('Query', 'Execute') AND INFO LIKE ? AND TIME_MS > 200 AND ID <> CONNECTION_ID()`,
    [like],
  );
  return Number(rows[0]?.n);
}

/** `promise` settled, or still pending once `other` has resolved: which came first. */
async function firstOf(
  promise: Promise<unknown>,
  other: Promise<unknown>,
): Promise<'settled' | 'pending'> {
  return Promise.race([
    promise.then(
      () => 'settled' as const,
      () => 'settled' as const,
    ),
    other.then(() => 'pending' as const),
  ]);
}

const keyIdOf = (row: OutboxRow): string | undefined => row.headers[OUTBOX_HEADER_SUBJECT_KEY];

for (const db of TEST_DATABASES) {
  describeWith(
    db.service === null ? [] : [db.service],
    `erasure racing enqueue on ${db.name}`,
    () => {
      const scope = useOutboxScope(db, { tablePrefix: 'outbox_ertr' });
      const server = db.name !== 'sqlite';

      interface Race {
        readonly h: OutboxApp;
        readonly table: string;
        readonly reader: PersonalDataReader;
        /** Erases `subject`; settled before the test's tables are dropped. */
        erase(subject: string): ReturnType<OutboxApp['admin']['erase']>;
        /** A transaction held open, rolled back after the test if still open. */
        hold<T>(
          work: (manager: EntityManager) => Promise<T>,
          isolation?: 'READ COMMITTED' | 'REPEATABLE READ',
        ): HeldTransaction<T>;
        /** Enqueues `subject`'s personal data on `key` in `manager`'s transaction. */
        enqueue(manager: EntityManager, subject: string, key?: string): Promise<string>;
        keyState(keyId: string): Promise<'live' | 'erased' | 'unknown'>;
      }

      async function race(keyWrapper = masterKeyWrapper(randomBytes(32))): Promise<Race> {
        const table = await scope.table('outbox_ertr');
        const quote = (name: string): string => scope.ds.driver.escape(name);
        scope.defer(async () => {
          await scope.ds.query(`DROP TABLE IF EXISTS ${quote(`${table}_subject_uses`)}`);
          await scope.ds.query(`DROP TABLE IF EXISTS ${quote(`${table}_subject_keys`)}`);
          await scope.ds.query(`DROP TABLE IF EXISTS ${quote(`${table}_claim_checks`)}`);
        });
        const h = await scope.open({ table, options: { erasure: { keyWrapper } } });
        const audit = new OutboxAuditStore(h.moduleRef.get<SqlPort>(OUTBOX_SQL), {
          tableName: uniqueTable('outbox_ertr_aud'),
        });
        await audit.ensure();
        scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS ${audit.names.table}`));
        const keys = subjectKeys({ dataSource: scope.ds, tableName: table, keyWrapper });
        return {
          h,
          table,
          reader: new PersonalDataReader(keys),
          erase(subject) {
            const erasing = h.admin.erase(subject, {
              actor: 'dpo@example.org',
              reason: 'race',
              auditTable: { tableName: audit.names.tableName },
            });
            scope.defer(() => erasing.catch(() => undefined));
            return erasing;
          },
          hold(work, isolation) {
            const held = holdTransaction(scope.ds, work, isolation);
            scope.defer(async () => {
              held.rollback();
              await held.ended.catch(() => undefined);
            });
            return held;
          },
          async enqueue(manager, subject, key = 'k1') {
            const [id] = await h.outbox.enqueue(
              [
                {
                  topic: 'users',
                  key,
                  type: 'user.updated',
                  payload: { userId: subject, email: EMAIL },
                  personal: { subject, fields: ['email'] },
                },
              ],
              manager,
            );
            return id as string;
          },
          async keyState(keyId) {
            const rows = await scope.ds.query<{ wrapped_key: unknown }[]>(
              `SELECT wrapped_key FROM ${quote(`${table}_subject_keys`)} WHERE key_id = ${server && db.name === 'postgres' ? '$1' : '?'}`,
              [keyId],
            );
            if (rows[0] === undefined) return 'unknown';
            return rows[0].wrapped_key === null ? 'erased' : 'live';
          },
        };
      }

      /**
       * What must hold of the table once everything settled: the message `id` is sealed, and it is
       * either under the erased key with that key's notice after it on its key, or (`after`) under
       * a live key and after the notice.
       */
      async function expectSettled(
        r: Race,
        id: string,
        erasedKeyId: string,
        placement: 'before-erasure' | 'after-erasure',
      ): Promise<void> {
        const rows = await r.h.rows();
        const message = rows.find((row) => row.messageId === id);
        expect(message).toBeDefined();
        expect(JSON.stringify(message!.payload)).not.toContain(EMAIL);
        const notice = rows.find(
          (row) => row.type === OUTBOX_ERASURE_NOTICE_TYPE && row.key === message!.key,
        );
        const order = rows.filter((row) => row.key === message!.key).map((row) => row.messageId);
        const opened = () =>
          r.reader.open({ headers: message!.headers, payload: message!.payload });
        if (placement === 'before-erasure') {
          expect(keyIdOf(message!)).toBe(erasedKeyId);
          expect(await r.keyState(erasedKeyId)).toBe('erased');
          expect(notice).toBeDefined();
          expect(order.indexOf(notice!.messageId)).toBeGreaterThan(order.indexOf(id));
          await expect(opened()).rejects.toBeInstanceOf(OutboxSubjectErasedError);
        } else {
          expect(keyIdOf(message!)).not.toBe(erasedKeyId);
          expect(await r.keyState(keyIdOf(message!)!)).toBe('live');
          if (notice !== undefined)
            expect(order.indexOf(notice.messageId)).toBeLessThan(order.indexOf(id));
          expect(await opened()).toMatchObject({ email: EMAIL });
        }
      }

      it('an erasure waits for an open enqueue that uses the subject key, then destroys it and notices after the message', async () => {
        const r = await race();
        const [first] = await r.h.enqueue({
          topic: 'users',
          key: 'k1',
          type: 'user.registered',
          payload: { userId: 'u-1', email: EMAIL },
          personal: { subject: 'u-1', fields: ['email'] },
        });
        const keyId = keyIdOf(await r.h.row(first as string))!;
        const t1 = r.hold((m) => r.enqueue(m, 'u-1'));
        const id = await t1.ready;
        const erasing = r.erase('u-1');
        if (server) {
          expect(
            await firstOf(
              erasing,
              waitFor('the erasure waits', async () => (await waiting(scope.ds, r.table)) > 0),
            ),
          ).toBe('pending');
        }
        t1.commit();
        await t1.ended;
        expect(await erasing).toEqual({ erased: true, keyId, notices: 1 });
        await expectSettled(r, id, keyId, 'before-erasure');
      });

      it('an erasure waits for an open enqueue that made the subject key, then destroys that key', async () => {
        const r = await race();
        const t1 = r.hold((m) => r.enqueue(m, 'u-2'));
        const id = await t1.ready;
        const erasing = r.erase('u-2');
        if (server) {
          expect(
            await firstOf(
              erasing,
              waitFor('the erasure waits', async () => (await waiting(scope.ds, r.table)) > 0),
            ),
          ).toBe('pending');
        }
        t1.commit();
        await t1.ended;
        const report = await erasing;
        expect(report).toMatchObject({ erased: true, notices: 1 });
        await expectSettled(r, id, report.keyId!, 'before-erasure');
      });

      it('an erasure after an open enqueue that made the subject key rolls back finds no key', async () => {
        const r = await race();
        const t1 = r.hold((m) => r.enqueue(m, 'u-3'));
        await t1.ready;
        const erasing = r.erase('u-3');
        if (server) {
          expect(
            await firstOf(
              erasing,
              waitFor('the erasure waits', async () => (await waiting(scope.ds, r.table)) > 0),
            ),
          ).toBe('pending');
        }
        t1.rollback();
        await expect(t1.ended).rejects.toThrow('rolled back by the test');
        expect(await erasing).toEqual({ erased: false, keyId: null, notices: 0 });
        expect(await r.h.rows()).toEqual([]);
      });

      // SQLite runs one transaction at a time: an enqueue cannot reach the key during an erasure.
      if (server) {
        it('an enqueue that reaches the subject key while an erasure holds it waits, then writes under a new key', async () => {
          const r = await race();
          const [first] = await r.h.enqueue([
            {
              topic: 'users',
              key: 'k1',
              type: 'user.registered',
              payload: { userId: 'u-4', email: EMAIL },
              personal: { subject: 'u-4', fields: ['email'] },
            },
          ]);
          const keyId = keyIdOf(await r.h.row(first as string))!;
          // A writer of the key k1 holds its ordering lock: the erasure, once it has destroyed the
          // key, waits there to write its notice on k1, its transaction open.
          const writer = r.hold((m) =>
            r.h.outbox.enqueue(
              [{ topic: 'users', key: 'k1', type: 'order.placed', payload: {} }],
              m,
            ),
          );
          await writer.ready;
          const erasing = r.erase('u-4');
          await waitFor(
            'the erasure waits for the key lock',
            async () => (await waiting(scope.ds, r.table)) === 1,
          );
          const t1 = r.hold((m) => r.enqueue(m, 'u-4', 'k2'));
          expect(
            await firstOf(
              t1.ready,
              waitFor(
                'the enqueue waits for the erasure',
                async () => (await waiting(scope.ds, r.table)) === 2,
              ),
            ),
          ).toBe('pending');
          writer.commit();
          await writer.ended;
          expect(await erasing).toEqual({ erased: true, keyId, notices: 1 });
          const id = await t1.ready;
          t1.commit();
          await t1.ended;
          await expectSettled(r, first as string, keyId, 'before-erasure');
          await expectSettled(r, id, keyId, 'after-erasure');
        });
      }

      // PostgreSQL at REPEATABLE READ cannot read past a row another transaction changed since
      // its snapshot: the enqueue that waited for the erasure fails, having written nothing.
      if (db.name === 'postgres') {
        it('an enqueue at REPEATABLE READ that waited for an erasure fails with a serialization error, writing nothing', async () => {
          const r = await race();
          const [first] = await r.h.enqueue([
            {
              topic: 'users',
              key: 'k1',
              payload: { userId: 'u-6', email: EMAIL },
              personal: { subject: 'u-6', fields: ['email'] },
            },
          ]);
          const writer = r.hold((m) =>
            r.h.outbox.enqueue(
              [{ topic: 'users', key: 'k1', type: 'order.placed', payload: {} }],
              m,
            ),
          );
          await writer.ready;
          const erasing = r.erase('u-6');
          await waitFor(
            'the erasure waits for the key lock',
            async () => (await waiting(scope.ds, r.table)) === 1,
          );
          const t1 = r.hold(async (m) => {
            // The snapshot is taken by the transaction's first statement, before the erasure ends.
            await m.query('SELECT 1');
            return r.enqueue(m, 'u-6', 'k2');
          }, 'REPEATABLE READ');
          await waitFor(
            'the enqueue waits for the erasure',
            async () => (await waiting(scope.ds, r.table)) === 2,
          );
          writer.commit();
          await writer.ended;
          expect(await erasing).toMatchObject({ erased: true, notices: 1 });
          await expect(t1.ready).rejects.toThrow(/could not serialize/);
          await expect(t1.ended).rejects.toThrow(/could not serialize/);
          expect((await r.h.rows()).filter((row) => row.key === 'k2')).toEqual([]);
          expect(first).toBeDefined();
        });
      }

      // Two enqueues of a subject's first messages, each past its look-up of the key (none yet)
      // before either inserts one: the key wrapper holds each until both have looked.
      if (server) {
        it('two enqueues making one new subject key at once both commit, under one key', async () => {
          const inner = masterKeyWrapper(randomBytes(32));
          let arrived = 0;
          let bothLooked!: () => void;
          const looked = new Promise<void>((resolve) => (bothLooked = resolve));
          const keyWrapper: OutboxKeyWrapper = {
            async wrap(dataKey, keyId) {
              arrived += 1;
              if (arrived === 2) bothLooked();
              await looked;
              return inner.wrap(dataKey, keyId);
            },
            unwrap: (wrapped, keyId) => inner.unwrap(wrapped, keyId),
          };
          const r = await race(keyWrapper);
          const ids = await Promise.all(
            ['k1', 'k2'].map((key) => scope.ds.transaction((m) => r.enqueue(m, 'u-5', key))),
          );
          const rows = await r.h.rows();
          const keyIds = ids.map((id) => keyIdOf(rows.find((row) => row.messageId === id)!));
          expect(keyIds[0]).toBeDefined();
          expect(keyIds[1]).toBe(keyIds[0]);
          expect(await r.erase('u-5')).toEqual({ erased: true, keyId: keyIds[0], notices: 2 });
        });
      }

      // Unforced interleavings: enqueues of one subject on three keys, each in a transaction of its
      // own that waits a random moment before it commits, and an erasure started at a random
      // moment among them. Whatever came first, each key's messages of the subject are under the
      // erased key and before its notice, or under a new live key and after it.
      if (server) {
        it('holds for random interleavings of enqueues and an erasure', async () => {
          const r = await race();
          for (let round = 0; round < 12; round += 1) {
            const subject = `u-r${round}`;
            const keys = ['ka', 'kb', 'kc'].map((k) => `${k}${round}`);
            // Half of the rounds start from a subject that has a key already.
            if (round % 2 === 0)
              await r.h.enqueue([
                {
                  topic: 'users',
                  key: keys[0],
                  payload: { userId: subject, email: EMAIL },
                  personal: { subject, fields: ['email'] },
                },
              ]);
            const pause = (): Promise<void> =>
              new Promise((resolve) => setTimeout(resolve, Math.floor(Math.random() * 30)));
            const enqueues = keys.map(async (key) => {
              await pause();
              return scope.ds.transaction(async (m) => {
                const id = await r.enqueue(m, subject, key);
                await pause();
                return id;
              });
            });
            const erasing = (async () => {
              await pause();
              return r.erase(subject);
            })();
            const outcomes = await Promise.allSettled(enqueues);
            const report = await erasing;
            // MariaDB: two enqueues making the erased subject's new key at once may deadlock on
            // the unique index's entry the erasure left (docs/erasure.md, Limits); the one rolled
            // back wrote nothing. Nothing else may fail.
            const failures = outcomes.flatMap((o) =>
              o.status === 'rejected' ? [o.reason as unknown] : [],
            );
            for (const failure of failures) {
              expect({ db: db.name, error: String(failure) }).toEqual({
                db: 'mariadb',
                error: expect.stringContaining('Deadlock'),
              });
            }
            const written = outcomes.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
            const rows = await r.h.rows();
            for (const key of keys) {
              const onKey = rows.filter((row) => row.key === key);
              const notice = onKey.findIndex((row) => row.type === OUTBOX_ERASURE_NOTICE_TYPE);
              const sealed = onKey.filter((row) => row.type !== OUTBOX_ERASURE_NOTICE_TYPE);
              for (const row of sealed) {
                const at = onKey.indexOf(row);
                const state = await r.keyState(keyIdOf(row)!);
                if (keyIdOf(row) === report.keyId) {
                  expect({ key, state, noticeAfter: notice > at }).toEqual({
                    key,
                    state: 'erased',
                    noticeAfter: true,
                  });
                } else {
                  expect({ key, state, noticeBefore: notice < at }).toEqual({
                    key,
                    state: 'live',
                    noticeBefore: true,
                  });
                }
              }
            }
            const ids = new Set(rows.map((row) => row.messageId));
            expect(written.filter((id) => !ids.has(id))).toEqual([]);
          }
        });
      }
    },
  );
}
