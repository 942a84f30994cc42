import {
  OutboxAdminInputError,
  OutboxInvalidMessageError,
  PermanentPublishError,
  type OutboxMessage,
} from '../../lib';
import { OutboxAuditStore } from '../../lib/admin';
import { OUTBOX_SQL } from '../../lib/outbox.constants';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { clearOutbox, RecordingPublisher } from '../../lib/testing';
import { OutboxOptionsError } from '../../lib';
import { dropOutboxTables, ensureOutboxTable, outboxTableDdl } from '../../lib/schema';
import { testDatabase, uniqueTable } from '../support/databases';
import { mergeOutboxOptions } from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';

// Issue 75, item 15: an options object given at run time with a key the method does not read
// is refused before any statement, so a script written for another build does nothing instead
// of running without the check it believes it asked for. PostgreSQL is enough: the refusal
// happens before SQL, and every assertion reads the table (and the audit table) afterwards.

const db = testDatabase('postgres');

const msg = (key: string, n: number): OutboxMessage => ({
  topic: 'orders',
  type: 'order.created',
  key,
  payload: { n },
});

describeWith(['postgres'], 'unknown option keys at run time (PostgreSQL)', () => {
  const scope = useOutboxScope(db, { tablePrefix: 'outbox_uk' });

  const open = async () => {
    const c = await scope.open({
      publisher: new RecordingPublisher(),
      options: mergeOutboxOptions(
        { retry: { maxAttempts: 1 }, dispatcher: { listen: false, pollIntervalMs: 50 } },
        {},
      ),
    });
    const auditTable = { tableName: uniqueTable('outbox_uk_aud') };
    const audit = new OutboxAuditStore(c.moduleRef.get<SqlPort>(OUTBOX_SQL), auditTable);
    await audit.ensure();
    scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS ${audit.names.table}`));
    return { c, audit, auditTable };
  };

  it('OutboxAdmin refuses an unknown key of every options object, naming it, and changes nothing', async () => {
    const { c, audit, auditTable } = await open();
    const [, dead] = await c.enqueue([msg('a', 1), msg('b', 2), msg('c', 3)]);
    c.publisher.fail(dead as string, 'permanent', {
      error: new PermanentPublishError('rejected'),
    });
    await c.runUntilIdle();
    const before = await c.rows();
    expect(before.map((r) => r.status)).toEqual(['delivered', 'dead', 'delivered']);
    const preview = await c.admin.previewRedrive({ topic: 'orders' });
    const who = { actor: 'ops', reason: 'replay', auditTable };

    // The reported script: a build's `expectedCount`, which this one does not have.
    const refused = c.admin.redrive({ topic: 'orders' }, {
      ...who,
      expectedCount: preview.count,
    } as never);
    await expect(refused).rejects.toBeInstanceOf(OutboxAdminInputError);
    await expect(refused).rejects.toMatchObject({
      field: 'expectedCount',
      message:
        'Invalid OutboxAdmin.redrive() options: expectedCount is not an option. Accepted ' +
        'options: actor, reason, destination, ratePerSecond, expected, maxCount, auditTable. ' +
        'Nothing was done.',
    });
    const cases: [string, () => Promise<unknown>, string][] = [
      [
        'redrive auditTable',
        () =>
          c.admin.redrive({ topic: 'orders' }, {
            ...who,
            auditTable: { ...auditTable, tablename: 'x' },
          } as never),
        'auditTable.tablename',
      ],
      [
        'previewRedrive',
        () => c.admin.previewRedrive({ topic: 'orders' }, { samplesize: 1 } as never),
        'samplesize',
      ],
      ['redrives', () => c.admin.redrives({ limt: 5 } as never), 'limt'],
      ['list page', () => c.admin.list({}, { cursor: '1' } as never), 'cursor'],
      ['blockedKeys', () => c.admin.blockedKeys({ size: 5 } as never), 'size'],
      ['stuckLeases', () => c.admin.stuckLeases({ olderThanMs: 5 } as never), 'olderThanMs'],
      ['retryWhere', () => c.admin.retryWhere({ topc: 'orders' } as never), 'topc'],
      ['purgeWhere', () => c.admin.purgeWhere({ topc: 'orders' } as never), 'topc'],
      [
        'gapRepairer',
        () => Promise.resolve().then(() => c.admin.gapRepairer({ ratePerSecnd: 1 } as never)),
        'ratePerSecnd',
      ],
    ];
    for (const [what, call, key] of cases) {
      const error: unknown = await call().then(
        () => new Error(`${what}: not refused`),
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(OutboxAdminInputError);
      expect((error as Error).message).toContain(key);
    }
    const near = await c.admin
      .previewRedrive({ topic: 'orders' }, { samplesize: 1 } as never)
      .catch((e: Error) => e.message);
    expect(near).toContain('did you mean sampleSize?');
    expect(near).toContain('Accepted options: sampleSize, maxCount.');

    // Nothing changed: no copy written, the dead letter still dead, nothing audited.
    expect(await c.rows()).toEqual(before);
    expect(await audit.recent(10)).toEqual([]);
    // The same calls with known keys do their work (the refusals were about the keys alone).
    const report = await c.admin.redrive(
      { topic: 'orders' },
      {
        ...who,
        expected: preview.confirmation as string,
      },
    );
    expect(report.count).toBe(2);
    expect(await audit.recent(10)).toHaveLength(1);
  });

  it('enqueue refuses an unknown per-call option and writes nothing', async () => {
    const { c } = await open();
    const before = await c.rows();
    const refused = scope.ds.transaction((m) =>
      c.outbox.enqueue(msg('a', 1), m, { delayMS: 60_000 } as never),
    );
    await expect(refused).rejects.toBeInstanceOf(OutboxInvalidMessageError);
    await expect(refused).rejects.toMatchObject({
      reason: 'invalid-schedule',
      message:
        'Invalid OutboxService.enqueue() options: delayMS is not an option; did you mean ' +
        'delayMs? Accepted options: availableAt, delayMs. Nothing was done.',
    });
    expect(await c.rows()).toEqual(before);
    const id = await scope.ds.transaction((m) =>
      c.outbox.enqueue(msg('a', 1), m, { delayMs: 60_000 }),
    );
    expect((await c.rows()).map((r) => r.messageId)).toEqual([id]);
  });

  it('clearOutbox refuses an unknown option and deletes nothing', async () => {
    const { c } = await open();
    await c.enqueue([msg('a', 1), msg('b', 2)]);
    const before = await c.rows();
    // `table` is not an option: ignored, it would have cleared the default table instead.
    await expect(clearOutbox(scope.ds, { table: c.table } as never)).rejects.toThrow(
      OutboxOptionsError,
    );
    await expect(clearOutbox(scope.ds, { table: c.table } as never)).rejects.toMatchObject({
      option: 'table',
      message: expect.stringContaining(
        'Accepted options: tableName, schema, partitioning, with, online.',
      ),
    });
    expect(await c.rows()).toEqual(before);
    expect(before).toHaveLength(2);
    expect(await clearOutbox(scope.ds, { tableName: c.table })).toBe(2);
    expect(await c.rows()).toEqual([]);
  });

  it('the schema functions refuse an unknown option and make or drop nothing', async () => {
    const { c } = await open();
    await c.enqueue([msg('a', 1)]);
    const before = await c.rows();
    const defaultTable = async () =>
      (await scope.ds.query<{ t: string | null }[]>(`SELECT to_regclass('outbox') AS t`))[0]?.t ??
      null;
    const outboxBefore = await defaultTable();
    // `table` is not an option: ignored, the default table `outbox` would be dropped or made.
    await expect(dropOutboxTables(scope.ds, { table: c.table } as never)).rejects.toMatchObject({
      option: 'table',
      message:
        'Invalid dropOutboxTables() options: table is not an option. Accepted options: ' +
        'tableName, schema, auditTable. Nothing was done.',
    });
    await expect(
      dropOutboxTables(scope.ds, {
        tableName: c.table,
        auditTable: { table: 'x' },
      } as never),
    ).rejects.toMatchObject({ option: 'auditTable.table' });
    await expect(ensureOutboxTable(scope.ds, { tablename: 'x' } as never)).rejects.toThrow(
      'Invalid ensureOutboxTable() options: tablename is not an option; did you mean tableName?',
    );
    expect(() => outboxTableDdl('postgres', { table: 'x' } as never)).toThrow(OutboxOptionsError);
    expect(await c.rows()).toEqual(before);
    expect(await defaultTable()).toBe(outboxBefore);
  });
});
