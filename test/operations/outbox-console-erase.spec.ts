import { randomBytes } from 'node:crypto';
import {
  OUTBOX_ERASURE_NOTICE_TYPE,
  OutboxSubjectErasedError,
  PersonalDataReader,
  subjectKeys,
} from '../../lib/erasure';
import { ensureOutboxConsoleAuditTable } from '../../lib/operations/console';
import { RecordingPublisher } from '../../lib/testing';
import { openConsoleApp, type ConsoleApp } from '../support/console-app';
import { get, post, tokenOf } from '../support/console-http';
import { testDatabase, uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';

// The console's Erase page over HTTP, on PostgreSQL: a CSRF-checked POST that needs a reason and
// the box ticked, then destroys the subject's key through the admin API (the notice reaches the
// publisher, the audit table records who and why without the subject), and never shows the
// subject again.

describeWith(['postgres'], 'OutboxConsole erase', () => {
  let c: ConsoleApp | undefined;
  let auditTableName = '';

  afterEach(async () => {
    if (c !== undefined) {
      await c.dataSource.query(`DROP TABLE IF EXISTS "${auditTableName}"`);
      await c.dataSource.query(`DROP TABLE IF EXISTS "${c.table}_subject_uses"`);
      await c.dataSource.query(`DROP TABLE IF EXISTS "${c.table}_subject_keys"`);
      await c.close();
    }
    c = undefined;
  });

  it('refuses without the token, a reason or the box, then erases and audits without the subject', async () => {
    auditTableName = uniqueTable('console_audit');
    const postgres = testDatabase('postgres');
    const scratch = uniqueTable('outbox_console');
    const setup = await postgres.open(scratch);
    await ensureOutboxConsoleAuditTable(setup, { tableName: auditTableName });
    await postgres.close(setup, scratch);
    const masterKey = randomBytes(32);
    const publisher = new RecordingPublisher();
    c = await openConsoleApp(publisher, {
      auditTableName,
      actor: () => 'dpo@example.com',
      erasure: { masterKey },
    });
    await c.enqueue([
      {
        topic: 'users',
        key: 'u',
        payload: { email: 'z@example.org' },
        personal: { subject: 'subj-9' },
      },
    ]);
    await c.dispatcher.drain();
    const reader = new PersonalDataReader(
      subjectKeys({ dataSource: c.dataSource, tableName: c.table, masterKey }),
    );
    const [sent] = publisher.messages;
    expect(await reader.open(sent!)).toEqual({ email: 'z@example.org' });

    const page = await get(`${c.url}/erase`);
    expect(page.status).toBe(200);
    expect(page.body).toContain('id="erase-form"');
    const form: [string, string][] = [
      ['csrf', tokenOf(page.body)],
      ['subject', 'subj-9'],
      ['reason', 'ticket 1234'],
    ];
    expect(
      (await post(`${c.url}/erase/run`, [...form.slice(1), ['irreversible', 'yes']])).status,
    ).toBe(403);
    const noReason = await post(`${c.url}/erase/run`, [
      ...form.filter(([k]) => k !== 'reason'),
      ['irreversible', 'yes'],
    ]);
    expect(noReason.status).toBe(400);
    const noBox = await post(`${c.url}/erase/run`, form);
    expect(noBox.status).toBe(400);
    expect(noBox.body).toContain('cannot be undone');
    expect(await reader.open(sent!)).toEqual({ email: 'z@example.org' });

    const done = await post(`${c.url}/erase/run`, [...form, ['irreversible', 'yes']]);
    expect(done.status).toBe(200);
    expect(done.body).toContain('data-erased="yes"');
    expect(done.body).not.toContain('subj-9');
    await expect(reader.open(sent!)).rejects.toBeInstanceOf(OutboxSubjectErasedError);
    await c.dispatcher.drain();
    expect(publisher.messages.map((m) => [m.type, m.key])).toEqual([
      ['users', 'u'],
      [OUTBOX_ERASURE_NOTICE_TYPE, 'u'],
    ]);
    const rows = await c.dataSource.query<{ actor: string; action: string; target: string }[]>(
      `SELECT actor, action, target FROM "${auditTableName}"`,
    );
    expect(rows.map((r) => [r.actor, r.action])).toEqual([['dpo@example.com', 'erase']]);
    expect(rows[0]?.target).not.toContain('subj-9');
    expect(rows[0]?.target).toContain('ticket 1234');
  });
});
