import { OutboxAuditStore, REDRIVE_ID_HEADER, REDRIVE_OF_HEADER } from '../../lib';
import { runOutboxCli } from '../../lib/operations/cli/outbox-cli';
import { OUTBOX_SQL } from '../../lib/outbox.constants';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { RecordingPublisher } from '../../lib/testing';
import { databaseUrlFor, readOutbox, TEST_DATABASES, uniqueTable } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';

// `outbox redrive` against real databases, run in-process through the CLI's own entry
// (runOutboxCli): the dry run writes nothing, a run without --yes refuses, --yes writes the
// copies and the audit entry; the dispatcher then delivers the copies.

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
      expect(JSON.parse(json.stdout)).toMatchObject({ dryRun: true, count: 2 });

      const refused = await cli([...base, '--reason', 'replay'], url);
      expect(refused.code).toBe(1);
      expect(refused.stdout).toContain('2 delivered messages');
      expect(refused.stderr).toContain('pass --yes');
      const noReason = await cli([...base, '--yes'], url);
      expect(noReason.code).toBe(2);
      expect(noReason.stderr).toContain('--reason is required');
      for (const [args, problem] of [
        [['--dry-run', '--yes', '--reason', 'x'], 'not both'],
        [['--since', 'yesterday', '--dry-run'], '--since "yesterday" is not a time'],
        [['--rate', '0', '--dry-run'], '--rate must be'],
        [['--error', 'x', '--dry-run'], '--error does not apply'],
      ] as const) {
        const bad = await cli([...base, ...args], url);
        expect(bad.code).toBe(2);
        expect(bad.stderr).toContain(problem);
      }
      const unfiltered = await cli(['redrive', '--table', c.table, '--dry-run'], url);
      expect(unfiltered.code).toBe(1);
      expect(unfiltered.stderr).toContain('an empty filter would re-drive every delivered message');
      const changed = await cli([...base, '--yes', '--reason', 'replay', '--expect', '5'], url);
      expect(changed.code).toBe(1);
      expect(changed.stderr).toContain('not the 5 confirmed');

      expect((await readOutbox(scope.ds, c.table)).length).toBe(rowsBefore);
      expect(await audit.recent(10)).toEqual([]);

      const done = await cli(
        [...base, '--yes', '--reason', 'billing replay', '--actor', 'ops-bot', '--to', 'orders.v2'],
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
  });
}
