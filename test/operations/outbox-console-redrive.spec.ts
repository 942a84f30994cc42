import { REDRIVE_ID_HEADER, REDRIVE_OF_HEADER } from '../../lib';
import { OutboxAuditStore } from '../../lib/admin';
import { OUTBOX_SQL } from '../../lib/outbox.constants';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { ensureOutboxConsoleAuditTable } from '../../lib/operations/console';
import { RecordingPublisher } from '../../lib/testing';
import { openConsoleApp, type ConsoleApp } from '../support/console-app';
import { countOf, get, post, tokenOf } from '../support/console-http';
import { testDatabase, uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';

// The console's Re-drive page over HTTP, on PostgreSQL: the preview counts what the admin API
// selects, the confirmation is a CSRF-checked POST that carries the preview's confirmation and
// refuses other messages (keeping what the operator typed), and the copies reach the publisher
// with their headers while the audit table records who and why. A copy's page links its original.

describeWith(['postgres'], 'OutboxConsole re-drive', () => {
  let c: ConsoleApp | undefined;
  let auditTableName = '';

  afterEach(async () => {
    if (c !== undefined) {
      await c.dataSource.query(`DROP TABLE IF EXISTS "${auditTableName}"`);
      await c.close();
    }
    c = undefined;
  });

  it('previews, refuses a changed count and a missing token, re-drives, and lists it', async () => {
    auditTableName = uniqueTable('console_audit');
    const postgres = testDatabase('postgres');
    const scratch = uniqueTable('outbox_console');
    const setup = await postgres.open(scratch);
    await ensureOutboxConsoleAuditTable(setup, { tableName: auditTableName });
    await postgres.close(setup, scratch);
    const publisher = new RecordingPublisher();
    c = await openConsoleApp(publisher, { auditTableName, actor: () => 'ops@example.com' });
    const ids = await c.enqueue([
      { topic: 'orders', key: 'a', payload: { n: 1 } },
      { topic: 'orders', key: 'a', payload: { n: 2 } },
      { topic: 'billing', key: 'b', payload: { n: 3 } },
    ]);
    await c.dispatcher.drain();
    publisher.clear();

    const empty = await get(`${c.url}/redrive`);
    expect(empty.status).toBe(200);
    expect(empty.body).toContain('No re-drive yet.');
    expect(empty.body).not.toContain('id="matched"');

    const page = await get(`${c.url}/redrive?topic=orders`);
    expect(countOf(page.body, 'matched')).toBe(2);
    expect(page.body).toContain(ids[0]);
    const expected = confirmationOf(page.body);
    expect(expected).toMatch(/^2-[0-9a-f]{32}$/);
    const form: [string, string][] = [
      ['csrf', tokenOf(page.body)],
      ['topic', 'orders'],
      ['reason', 'search index rebuilt'],
      ['destination', 'orders.reindex'],
    ];

    expect(
      (await post(`${c.url}/redrive/run`, [...form.slice(1), ['expected', expected]])).status,
    ).toBe(403);
    const changed = await post(`${c.url}/redrive/run`, [
      ...form,
      ['expected', `3-${'0'.repeat(32)}`],
    ]);
    expect(changed.status).toBe(409);
    expect(changed.body).toContain('not the 3 confirmed');
    expect(countOf(changed.body, 'matched')).toBe(2);
    const count = await post(`${c.url}/redrive/run`, [...form, ['expected', '2']]);
    expect(count.status).toBe(400);
    expect(count.body).toContain('expected must be the confirmation of the preview shown');
    const noReason = await post(`${c.url}/redrive/run`, [
      ...form.filter(([k]) => k !== 'reason'),
      ['expected', expected],
    ]);
    expect(noReason.status).toBe(400);
    expect(await c.admin.redrives({ auditTable: { tableName: auditTableName } })).toEqual([]);

    const done = await post(`${c.url}/redrive/run`, [...form, ['expected', expected]]);
    expect(done.status).toBe(200);
    expect(countOf(done.body, 'result')).toBe(2);
    await c.dispatcher.drain();
    expect(publisher.messages.map((r) => [r.topic, r.headers[REDRIVE_OF_HEADER]])).toEqual([
      ['orders.reindex', ids[0]],
      ['orders.reindex', ids[1]],
    ]);
    const redriveId = publisher.messages[0]?.headers[REDRIVE_ID_HEADER] ?? '';
    expect(done.body).toContain(redriveId);

    const rows = await c.dataSource.query<{ actor: string; action: string; affected: number }[]>(
      `SELECT actor, action, affected FROM "${auditTableName}"`,
    );
    expect(rows).toEqual([{ actor: 'ops@example.com', action: 'redrive', affected: 2 }]);
    const history = await get(`${c.url}/redrive`);
    expect(history.body).toMatch(
      /<td>ops@example.com<\/td><td>search index rebuilt<\/td><td> ?topic=&quot;orders&quot; ?<\/td><td> ?orders.reindex ?<\/td><td>2<\/td>/,
    );
    expect(history.body).toContain(redriveId);
  });

  it('refuses a confirmation whose messages changed with their count kept, and keeps what was typed', async () => {
    auditTableName = uniqueTable('console_audit');
    const postgres = testDatabase('postgres');
    const scratch = uniqueTable('outbox_console');
    const setup = await postgres.open(scratch);
    await ensureOutboxConsoleAuditTable(setup, { tableName: auditTableName });
    await postgres.close(setup, scratch);
    const publisher = new RecordingPublisher();
    c = await openConsoleApp(publisher, { auditTableName, actor: () => 'ops@example.com' });
    const ids = await c.enqueue([
      { topic: 'orders', key: 'a', payload: { n: 1 } },
      { topic: 'orders', key: 'a', payload: { n: 2 } },
    ]);
    await c.dispatcher.drain();
    const page = await get(`${c.url}/redrive?key=a`);
    const expected = confirmationOf(page.body);

    // Cleaned, and another message of the key delivered: the same count, other messages.
    await c.dataSource.query(`DELETE FROM "${c.table}" WHERE message_id = $1`, [ids[0]]);
    const [fresh] = await c.enqueue([{ topic: 'orders', key: 'a', payload: { n: 3 } }]);
    await c.dispatcher.drain();
    publisher.clear();
    const before = await c.dataSource.query<unknown[]>(`SELECT * FROM "${c.table}" ORDER BY id`);

    const refused = await post(`${c.url}/redrive/run`, [
      ['csrf', tokenOf(page.body)],
      ['key', 'a'],
      ['reason', 'consumer <b>restored</b>'],
      ['destination', 'orders.replay'],
      ['rate', '5'],
      ['expected', expected],
    ]);
    expect(refused.status).toBe(409);
    expect(refused.body).toContain('as many as confirmed but not the same ones');
    expect(countOf(refused.body, 'matched')).toBe(2);
    expect(refused.body).toContain(fresh);
    // The new preview's confirmation, and what the operator typed, escaped, kept in the form.
    const again = confirmationOf(refused.body);
    expect(again).toMatch(/^2-[0-9a-f]{32}$/);
    expect(again).not.toBe(expected);
    expect(refused.body).toMatch(
      /<input name="reason" id="reason" required maxlength="500" value="consumer &lt;b&gt;restored&lt;\/b&gt;" \/>/,
    );
    expect(refused.body).toMatch(/<input name="destination" [^>]*value="orders\.replay" \/>/);
    expect(refused.body).toMatch(/<input name="rate" [^>]*value="5" \/>/);
    expect(await c.dataSource.query(`SELECT * FROM "${c.table}" ORDER BY id`)).toEqual(before);
    expect(await c.admin.redrives({ auditTable: { tableName: auditTableName } })).toEqual([]);

    const done = await post(`${c.url}/redrive/run`, [
      ['csrf', tokenOf(refused.body)],
      ['key', 'a'],
      ['reason', 'consumer restored'],
      ['expected', again],
    ]);
    expect(done.status).toBe(200);
    await c.dispatcher.drain();
    expect(publisher.messages.map((r) => r.headers[REDRIVE_OF_HEADER])).toEqual([ids[1], fresh]);
  });

  it('links a copy to its original, and shows Due only while a message waits to be sent', async () => {
    auditTableName = uniqueTable('console_audit');
    const publisher = new RecordingPublisher().fail({ key: 'bad' }, 'permanent');
    c = await openConsoleApp(publisher);
    await new OutboxAuditStore(c.app.get<SqlPort>(OUTBOX_SQL), {
      tableName: auditTableName,
    }).ensure();
    const [original, dead] = await c.enqueue([
      { topic: 'orders', key: 'a', payload: { n: 1 } },
      { topic: 'orders', key: 'bad', payload: { n: 2 } },
    ]);
    const [later] = await c.enqueue([
      {
        topic: 'orders',
        key: 'b',
        payload: { n: 3 },
        availableAt: new Date(Date.now() + 3_600_000),
      },
    ]);
    await c.dispatcher.drain();
    await c.admin.redrive(
      { key: 'a' },
      { actor: 'ops', reason: 'replay', auditTable: { tableName: auditTableName } },
    );
    await c.dispatcher.drain();
    const copy = publisher.messages.find((r) => r.headers[REDRIVE_OF_HEADER] === original);
    expect(copy).toBeDefined();

    const copyPage = (await get(`${c.url}/messages/${copy?.messageId ?? ''}`)).body;
    expect(copyPage).toContain(
      `<th>x-outbox-redrive-of</th><td><a href="/outbox/messages/${original}" id="redrive-of">${original}</a></td>`,
    );
    expect((await get(`${c.url}/messages/${original}`)).status).toBe(200);
    for (const [id, status] of [
      [original, 'delivered'],
      [copy?.messageId, 'delivered'],
      [dead, 'dead'],
    ] as const) {
      const page = (await get(`${c.url}/messages/${id ?? ''}`)).body;
      expect(page).toContain(`<th>Status</th><td>${status}</td>`);
      expect(page).not.toContain('<th>Due</th>');
    }
    const pending = (await get(`${c.url}/messages/${later}`)).body;
    expect(pending).toMatch(/<th>Due<\/th><td>\d{4}-\d{2}-\d{2}/);

    // A header that is not a message id (written by hand: enqueue refuses x-outbox-* headers)
    // is shown as text, escaped, and linked nowhere.
    await c.dataSource.query(`UPDATE "${c.table}" SET headers = $1 WHERE message_id = $2`, [
      JSON.stringify({ 'x-outbox-redrive-of': '"><script>x</script>' }),
      later,
    ]);
    const forged = (await get(`${c.url}/messages/${later}`)).body;
    expect(forged).toContain(
      '<th>x-outbox-redrive-of</th><td>&quot;&gt;&lt;script&gt;x&lt;/script&gt;</td>',
    );
    expect(forged).not.toContain('id="redrive-of"');
  });
});

/** The confirmation the page's re-drive form carries. */
function confirmationOf(page: string): string {
  return /<input type="hidden" name="expected" value="([^"]+)"/.exec(page)?.[1] ?? '';
}
