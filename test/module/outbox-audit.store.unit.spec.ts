import { OutboxOptionsError } from '../../lib';
import { OutboxAuditStore } from '../../lib/admin';
import type { SqlPort } from '../../lib/store/ports/sql-port';

// new OutboxAuditStore() refuses a key of its options it does not read, as every options object
// does: `{ tablename: 'billing_audit' }` recorded and listed re-drives in the default table.

function port(): SqlPort & { readonly statements: string[] } {
  const statements: string[] = [];
  return {
    databaseType: 'postgres',
    statements,
    query: (sql: string) => {
      statements.push(sql);
      return Promise.resolve({ rows: [], affected: 0 });
    },
  } as unknown as SqlPort & { readonly statements: string[] };
}

describe('new OutboxAuditStore() options', () => {
  it('refuses an unknown key, naming it, the one it likely meant and the accepted ones', () => {
    const sql = port();
    const build = (): OutboxAuditStore =>
      new OutboxAuditStore(sql, { tablename: 'billing_audit' } as never);
    expect(build).toThrow(OutboxOptionsError);
    expect(build).toThrow(
      'Invalid new OutboxAuditStore() options: tablename is not an option; did you mean ' +
        'tableName? Accepted options: tableName, schema. Nothing was done.',
    );
    let error: unknown;
    try {
      build();
    } catch (caught) {
      error = caught;
    }
    expect(error).toMatchObject({ option: 'tablename' });
    expect(sql.statements).toEqual([]);
  });

  it('takes tableName and schema, and reads the table they name', async () => {
    const sql = port();
    const store = new OutboxAuditStore(sql, { tableName: 'billing_audit', schema: 'ops' });
    expect(store.names).toMatchObject({ tableName: 'billing_audit', schema: 'ops' });
    await store.probe();
    expect(sql.statements).toHaveLength(1);
    expect(sql.statements[0]).toContain('"ops"."billing_audit"');
    expect(new OutboxAuditStore(sql).names.tableName).toBe('outbox_console_audit');
  });
});
