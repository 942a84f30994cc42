import { REDRIVE_ID_HEADER, REDRIVE_OF_HEADER } from '../../lib';
import { OutboxAuditStore } from '../../lib/admin';
import { runOutboxCli } from '../../lib/operations/cli/outbox-cli';
import { OUTBOX_SQL } from '../../lib/outbox.constants';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { RecordingPublisher } from '../../lib/testing';
import {
  databaseUrlFor,
  readOutbox,
  storedId,
  TEST_DATABASES,
  uniqueTable,
} from '../support/databases';
import { quoteTable } from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';

// `outbox redrive` against real databases, run in-process through the CLI's own entry
// (runOutboxCli): the dry run writes nothing and prints the confirmation of what it showed, a
// run without --yes refuses, --yes --expect writes the copies of exactly those messages and the
// audit entry (or nothing, when they changed); the dispatcher then delivers the copies. The
// audit table the run needs is made by `schema migrate --audit`.

async function cli(
  args: readonly string[],
  url: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await runOutboxCli(
    args,
    { DATABASE_URL: url },
    { stdout: (t) => (stdout += t), stderr: (t) => (stderr += t) },
  );
  return { code, stdout, stderr };
}

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `outbox redrive on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_crd' });

    it('previews with --dry-run, refuses without --yes, and re-drives with --yes', async () => {
      const publisher = new RecordingPublisher();
      const c = await scope.open({
        publisher,
        options: { dispatcher: { listen: false, pollIntervalMs: 50 } },
      });
      const auditTable = uniqueTable('outbox_crd_aud');
      const audit = new OutboxAuditStore(c.moduleRef.get<SqlPort>(OUTBOX_SQL), {
        tableName: auditTable,
      });
      await audit.ensure();
      scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS ${audit.names.table}`));
      const ids = await c.enqueue([
        { topic: 'orders', type: 'order.created', key: 'a', payload: { n: 1 } },
        { topic: 'orders', type: 'order.created', key: 'a', payload: { n: 2 } },
        { topic: 'billing', type: 'invoice.sent', key: 'b', payload: { n: 3 } },
      ]);
      await c.runUntilIdle();
      publisher.clear();
      const url = databaseUrlFor(db, scope.ds);
      const base = [
        'redrive',
        '--table',
        c.table,
        '--audit-table',
        auditTable,
        '--topic',
        'orders',
      ];
      const rowsBefore = (await readOutbox(scope.ds, c.table)).length;

      const dry = await cli([...base, '--since', '1h', '--dry-run'], url);
      expect(dry).toMatchObject({ code: 0, stderr: '' });
      expect(dry.stdout).toContain('2 delivered messages in the outbox match.');
      expect(dry.stdout).toContain(ids[0]);
      expect(dry.stdout).toContain('Dry run: nothing sent.');
      const json = await cli([...base, '--dry-run', '--json'], url);
      const { confirmation } = JSON.parse(json.stdout) as { confirmation: string };
      expect(JSON.parse(json.stdout)).toMatchObject({
        dryRun: true,
        count: 2,
        confirmation: expect.stringMatching(/^2-[0-9a-f]{32}$/) as unknown,
        auditTable: { ready: true },
      });
      expect(dry.stdout).toContain(`Confirmation: ${confirmation} (--yes --expect ${confirmation}`);

      const refused = await cli([...base, '--reason', 'replay'], url);
      expect(refused.code).toBe(1);
      expect(refused.stdout).toContain('2 delivered messages');
      expect(refused.stderr).toContain(`pass --yes --expect ${confirmation}`);
      const noReason = await cli([...base, '--yes'], url);
      expect(noReason.code).toBe(2);
      expect(noReason.stderr).toContain('--reason is required');
      for (const [args, problem] of [
        [['--dry-run', '--yes', '--reason', 'x'], 'not both'],
        [['--since', 'yesterday', '--dry-run'], '--since "yesterday" is not a time'],
        [['--rate', '0', '--dry-run'], '--rate must be'],
        [['--error', 'x', '--dry-run'], '--error does not apply'],
        [['--yes', '--reason', 'x', '--expect', '2'], '--expect takes the confirmation'],
        [['--dry-run', '--expect', confirmation], '--expect goes with --yes'],
      ] as const) {
        const bad = await cli([...base, ...args], url);
        expect(bad.code).toBe(2);
        expect(bad.stderr).toContain(problem);
      }
      const unfiltered = await cli(['redrive', '--table', c.table, '--dry-run'], url);
      expect(unfiltered.code).toBe(1);
      expect(unfiltered.stderr).toContain('an empty filter would re-drive every delivered message');
      const other = `2-${'0'.repeat(32)}`;
      const changed = await cli([...base, '--yes', '--reason', 'replay', '--expect', other], url);
      expect(changed.code).toBe(1);
      expect(changed.stderr).toContain('as many as confirmed but not the same ones');

      expect((await readOutbox(scope.ds, c.table)).length).toBe(rowsBefore);
      expect(await audit.recent(10)).toEqual([]);

      const done = await cli(
        [
          ...base,
          '--yes',
          '--expect',
          confirmation,
          '--reason',
          'billing replay',
          '--actor',
          'ops-bot',
          '--to',
          'orders.v2',
        ],
        url,
      );
      expect(done).toMatchObject({ code: 0, stderr: '' });
      expect(done.stdout).toContain('Re-drove 2 messages to orders.v2');
      await c.runUntilIdle();
      expect(publisher.messages.map((r) => [r.topic, r.headers[REDRIVE_OF_HEADER]])).toEqual([
        ['orders.v2', ids[0]],
        ['orders.v2', ids[1]],
      ]);
      const redriveId = publisher.messages[0]?.headers[REDRIVE_ID_HEADER];
      const listed = await cli(['redrives', '--table', c.table, '--audit-table', auditTable], url);
      expect(listed).toMatchObject({ code: 0, stderr: '' });
      expect(listed.stdout).toMatch(/ops-bot\s+billing replay\s+topic="orders"\s+orders.v2\s+2\s/);
      expect(listed.stdout).toContain(redriveId);
      const [entry] = await c.admin.redrives({ auditTable: { tableName: auditTable } });
      expect(entry).toMatchObject({
        redriveId,
        actor: 'ops-bot',
        reason: 'billing replay',
        destination: 'orders.v2',
        count: 2,
        filter: { topic: 'orders' },
      });
    });

    it('--yes --expect refuses, writing nothing, when a previewed message was cleaned and another delivered; --yes alone sends what it prints', async () => {
      const publisher = new RecordingPublisher();
      const c = await scope.open({
        publisher,
        options: { dispatcher: { listen: false, pollIntervalMs: 50 } },
      });
      const auditTable = uniqueTable('outbox_crd_aud');
      const audit = new OutboxAuditStore(c.moduleRef.get<SqlPort>(OUTBOX_SQL), {
        tableName: auditTable,
      });
      await audit.ensure();
      scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS ${audit.names.table}`));
      const ids = await c.enqueue([
        { topic: 'orders', key: 'a', payload: { n: 1 } },
        { topic: 'orders', key: 'a', payload: { n: 2 } },
      ]);
      await c.runUntilIdle();
      const url = databaseUrlFor(db, scope.ds);
      const base = ['redrive', '--table', c.table, '--audit-table', auditTable, '--key', 'a'];
      const dry = await cli([...base, '--dry-run', '--json'], url);
      const { confirmation } = JSON.parse(dry.stdout) as { confirmation: string };

      await scope.ds.query(
        `DELETE FROM ${quoteTable(scope.ds, c.table)} WHERE message_id = ${db.name === 'postgres' ? '$1' : '?'}`,
        [storedId(db.name, ids[0] as string)],
      );
      const [fresh] = await c.enqueue([{ topic: 'orders', key: 'a', payload: { n: 3 } }]);
      await c.runUntilIdle();
      publisher.clear();
      const before = await readOutbox(scope.ds, c.table);

      const refused = await cli(
        [...base, '--yes', '--expect', confirmation, '--reason', 'replay'],
        url,
      );
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain(
        'the filter selects 2 delivered message(s) now, as many as confirmed but not the same ones',
      );
      expect(await readOutbox(scope.ds, c.table)).toEqual(before);
      expect(await audit.recent(10)).toEqual([]);

      // Without --expect, the run confirms the set it prints itself.
      const done = await cli([...base, '--yes', '--reason', 'replay'], url);
      expect(done).toMatchObject({ code: 0, stderr: '' });
      expect(done.stdout).toContain(ids[1]);
      expect(done.stdout).toContain(fresh);
      expect(done.stdout).toContain('Re-drove 2 messages');
      await c.runUntilIdle();
      expect(publisher.messages.map((r) => r.headers[REDRIVE_OF_HEADER])).toEqual([ids[1], fresh]);
    });

    it('without the audit table: the dry run warns, --yes refuses naming the command, schema migrate --audit makes it, then --yes re-drives', async () => {
      const publisher = new RecordingPublisher();
      const c = await scope.open({
        publisher,
        options: { dispatcher: { listen: false, pollIntervalMs: 50 } },
      });
      const auditTable = uniqueTable('outbox_crd_aud');
      const names = new OutboxAuditStore(c.moduleRef.get<SqlPort>(OUTBOX_SQL), {
        tableName: auditTable,
      }).names;
      scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS ${names.table}`));
      const [id] = await c.enqueue([{ topic: 'orders', key: 'a', payload: { n: 1 } }]);
      await c.runUntilIdle();
      publisher.clear();
      const url = databaseUrlFor(db, scope.ds);
      const base = [
        'redrive',
        '--table',
        c.table,
        '--audit-table',
        auditTable,
        '--topic',
        'orders',
      ];
      const make = `outbox schema migrate --audit --table ${c.table} --audit-table ${auditTable}`;
      const rowsBefore = await readOutbox(scope.ds, c.table);

      const dry = await cli([...base, '--dry-run'], url);
      expect(dry.code).toBe(0);
      expect(dry.stdout).toContain('Dry run: nothing sent.');
      expect(dry.stderr).toContain(
        `outbox: warning: the audit table ${names.table} cannot be read (`,
      );
      expect(dry.stderr).toContain(
        `--yes will be refused until it exists. Create it with "${make}"`,
      );
      expect(dry.stderr).toContain('outboxAuditTableDdl(dialect)');
      const json = await cli([...base, '--dry-run', '--json'], url);
      expect(JSON.parse(json.stdout)).toMatchObject({
        count: 1,
        auditTable: { ready: false, table: names.table },
      });
      const confirmation = (JSON.parse(json.stdout) as { confirmation: string }).confirmation;

      const refused = await cli([...base, '--yes', '--expect', confirmation, '--reason', 'r'], url);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain(`Re-drive refused: the audit table ${names.table}`);
      expect(refused.stderr).toContain(`Create it with "${make}"`);
      expect(refused.stderr).toContain('outboxAuditTableDdl(dialect)');
      const listed = await cli(['redrives', '--table', c.table, '--audit-table', auditTable], url);
      expect(listed.code).toBe(1);
      expect(listed.stderr).toContain(`Create it with "${make}"`);
      // The admin API's refusal names the same DDL function, and the command.
      const api = await c.admin
        .redrive(
          { topic: 'orders' },
          { actor: 'a', reason: 'r', auditTable: { tableName: auditTable } },
        )
        .catch((e: unknown) => e);
      expect(api).toMatchObject({ reason: 'no-audit-table' });
      expect((api as Error).message).toContain('outboxAuditTableDdl(dialect)');
      expect((api as Error).message).toContain('"outbox schema migrate --audit"');
      expect(await readOutbox(scope.ds, c.table)).toEqual(rowsBefore);

      const made = await cli(make.split(' ').slice(1), url);
      expect(made).toMatchObject({ code: 0, stderr: '' });
      expect(made.stdout).toContain(`Created the audit table ${names.table}`);
      const again = await cli([...make.split(' ').slice(1), '--json'], url);
      expect(JSON.parse(again.stdout)).toMatchObject({ created: false, auditCreated: false });

      const ready = await cli([...base, '--dry-run'], url);
      expect(ready).toMatchObject({ code: 0, stderr: '' });
      const done = await cli(
        [...base, '--yes', '--expect', confirmation, '--reason', 'audited now'],
        url,
      );
      expect(done).toMatchObject({ code: 0, stderr: '' });
      await c.runUntilIdle();
      expect(publisher.messages.map((r) => r.headers[REDRIVE_OF_HEADER])).toEqual([id]);
      const [entry] = await c.admin.redrives({ auditTable: { tableName: auditTable } });
      expect(entry).toMatchObject({ reason: 'audited now', count: 1 });
    });

    it('schema print --audit prints the audit table with the others', async () => {
      const printed = await cli(
        ['schema', 'print', '--dialect', db.name, '--audit', '--audit-table', 'ops_audit'],
        databaseUrlFor(db, scope.ds),
      );
      expect(printed.code).toBe(0);
      expect(printed.stdout).toMatch(/CREATE TABLE IF NOT EXISTS [`"]?ops_audit[`"]? \(/);
      const alone = await cli(['schema', 'print', '--dialect', db.name, '--audit-table', 'x'], '');
      expect(alone.code).toBe(2);
      expect(alone.stderr).toContain('--audit-table goes with --audit');
    });
  });
}
