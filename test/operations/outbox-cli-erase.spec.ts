import { randomBytes } from 'node:crypto';
import { OutboxAuditStore } from '../../lib/admin';
import {
  OUTBOX_ERASURE_NOTICE_TYPE,
  OutboxSubjectErasedError,
  PersonalDataReader,
  subjectKeys,
} from '../../lib/erasure';
import { runOutboxCli } from '../../lib/operations/cli/outbox-cli';
import { OUTBOX_SQL } from '../../lib/outbox.constants';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { RecordingPublisher } from '../../lib/testing';
import { databaseUrlFor, TEST_DATABASES, uniqueTable } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';

// `outbox erase <subject>` against real databases, run in-process through the CLI's entry: it
// refuses without a reason or --yes (nothing destroyed), then destroys the subject's data key,
// enqueues the notice the dispatcher delivers, and records the erasure in the audit table.

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
  describeWith(db.service === null ? [] : [db.service], `outbox erase on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_cer' });

    it('refuses without --reason or --yes, then erases the subject, notices its key and audits it', async () => {
      const masterKey = randomBytes(32);
      const publisher = new RecordingPublisher();
      const c = await scope.open({
        publisher,
        options: { erasure: { masterKey }, dispatcher: { listen: false, pollIntervalMs: 50 } },
      });
      const quote = (name: string): string => scope.ds.driver.escape(name);
      scope.defer(async () => {
        await scope.ds.query(`DROP TABLE IF EXISTS ${quote(`${c.table}_subject_uses`)}`);
        await scope.ds.query(`DROP TABLE IF EXISTS ${quote(`${c.table}_subject_keys`)}`);
      });
      const auditTable = uniqueTable('outbox_cer_aud');
      const audit = new OutboxAuditStore(c.moduleRef.get<SqlPort>(OUTBOX_SQL), {
        tableName: auditTable,
      });
      await audit.ensure();
      scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS ${audit.names.table}`));
      await c.enqueue([
        {
          topic: 'users',
          key: 'a',
          payload: { email: 'x@example.org' },
          personal: { subject: 's-1' },
        },
        {
          topic: 'users',
          key: 'b',
          payload: { email: 'y@example.org' },
          personal: { subject: 's-2' },
        },
      ]);
      await c.runUntilIdle();
      const [first] = publisher.messages;
      const reader = new PersonalDataReader(
        subjectKeys({ dataSource: scope.ds, tableName: c.table, masterKey }),
      );
      expect(await reader.open(first!)).toEqual({ email: 'x@example.org' });
      const url = databaseUrlFor(db, scope.ds);
      const base = ['erase', 's-1', '--table', c.table, '--audit-table', auditTable];

      const noReason = await cli([...base, '--yes'], url);
      expect(noReason.code).toBe(2);
      expect(noReason.stderr).toContain('--reason is required');
      const noYes = await cli([...base, '--reason', 'ticket 7'], url);
      expect(noYes.code).toBe(1);
      expect(noYes.stderr).toContain('Pass --yes');
      expect(await reader.open(first!)).toEqual({ email: 'x@example.org' });
      expect(await audit.recent(10)).toEqual([]);

      const done = await cli([...base, '--reason', 'ticket 7', '--actor', 'dpo', '--yes'], url);
      expect(done).toMatchObject({ code: 0, stderr: '' });
      expect(done.stdout).toContain('1 erasure notice enqueued');
      await expect(reader.open(first!)).rejects.toBeInstanceOf(OutboxSubjectErasedError);
      expect(await reader.open(publisher.messages[1]!)).toEqual({ email: 'y@example.org' });
      await c.runUntilIdle();
      expect(publisher.messages.map((m) => [m.type, m.key])).toEqual([
        ['users', 'a'],
        ['users', 'b'],
        [OUTBOX_ERASURE_NOTICE_TYPE, 'a'],
      ]);
      const [entry] = await audit.recent(10, 'erase');
      expect(entry).toMatchObject({ actor: 'dpo', action: 'erase', scope: 'subject', affected: 1 });
      expect(entry?.target).not.toContain('s-1');
      const again = await cli([...base, '--reason', 'ticket 7', '--yes', '--json'], url);
      expect(JSON.parse(again.stdout)).toEqual({ erased: false, keyId: null, notices: 0 });
    });
  });
}
