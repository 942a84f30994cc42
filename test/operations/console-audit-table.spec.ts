import type { DataSource } from 'typeorm';
import { OutboxOptionsError } from '../../lib';
import { ConsoleAuditStore } from '../../lib/operations/console/audit/console-audit-store';
import { ensureOutboxConsoleAuditTable } from '../../lib/operations/console';
import { TEST_DATABASES, uniqueTable } from '../support/databases';
import { dropOutboxTable } from '../support/outbox-harness';
import { describeWith } from '../support/services';

// The console's audit table on every database: created by ensureOutboxConsoleAuditTable, its
// rows written and read back newest first with their time in UTC, a missing table refused.

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `Console audit table on ${db.name}`, () => {
    let ds: DataSource;
    const outboxTable = uniqueTable('outbox_cat');
    beforeAll(async () => {
      ds = await db.open(outboxTable);
    });
    afterAll(async () => {
      await db.close(ds, outboxTable);
    });

    it('keeps every action, newest first, at the database time', async () => {
      const tableName = uniqueTable('console_audit');
      await ensureOutboxConsoleAuditTable(ds, { tableName });
      await ensureOutboxConsoleAuditTable(ds, { tableName }); // idempotent
      try {
        const store = new ConsoleAuditStore(ds, { tableName });
        await store.check();
        const before = Date.now();
        const base = { at: new Date(0), scope: 'filter', confirmed: 2, affected: 2 } as const;
        await store.insert({ ...base, actor: 'alice', action: 'purge', target: 'topic="orders"' });
        await store.insert({ ...base, actor: 'bob ✓', action: 'retry', target: 'x'.repeat(3000) });
        const entries = await store.recent(10);
        expect(
          entries.map((e) => [
            e.actor,
            e.action,
            e.scope,
            e.target.length,
            e.confirmed,
            e.affected,
          ]),
        ).toEqual([
          ['bob ✓', 'retry', 'filter', 2000, 2, 2],
          ['alice', 'purge', 'filter', 'topic="orders"'.length, 2, 2],
        ]);
        for (const e of entries) {
          // The database clock, in UTC: within a minute of this process's clock.
          expect(Math.abs(e.at.getTime() - before)).toBeLessThan(60_000);
        }
        expect(await store.recent(1)).toHaveLength(1);
      } finally {
        await dropOutboxTable(ds, tableName);
      }
    });

    it('refuses a missing table with the way to create it', async () => {
      const store = new ConsoleAuditStore(ds, { tableName: uniqueTable('console_audit_missing') });
      await expect(store.check()).rejects.toThrow(OutboxOptionsError);
      await expect(store.check()).rejects.toThrow(/ensureOutboxConsoleAuditTable\(dataSource\)/);
    });
  });
}
