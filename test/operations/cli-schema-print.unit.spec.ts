import { openSqliteFile } from '../connections/driver-targets';
import { betterSqlite3SqlPort } from '../../lib/drivers/better-sqlite3/better-sqlite3.sql-port';
import { parseCliArgs } from '../../lib/operations/cli/cli-args';
import { CliUsageError } from '../../lib/operations/cli/cli-usage.error';
import { runOutboxCli } from '../../lib/operations/cli/outbox-cli';
import { outboxSchemaStatus } from '../../lib/store/schema/schema-status';
import { OUTBOX_STEP_OPTIONS } from '../../lib/store/schema/schema-steps';

async function print(argv: string[]): Promise<string[]> {
  let stdout = '';
  const code = await runOutboxCli(
    ['schema', 'print', '--json', ...argv],
    {},
    {
      stdout: (text) => (stdout += text),
      stderr: () => undefined,
    },
  );
  expect(code).toBe(0);
  return (JSON.parse(stdout) as { statements: string[] }).statements;
}

describe('outbox schema print', () => {
  // Run on a fresh database, what it prints is a table at the latest schema version: made from
  // the step list migrate runs, it cannot stop at an older step as it once did (step 5 of 9).
  it.each([
    ['without --with', [] as string[], []],
    ['with every option', ['--with', OUTBOX_STEP_OPTIONS.join(',')], OUTBOX_STEP_OPTIONS],
  ])('makes a table that status finds up to date (%s)', async (_, flags, asked) => {
    const db = openSqliteFile(':memory:');
    try {
      const sql = betterSqlite3SqlPort(db);
      for (const statement of await print(['--dialect', 'sqlite', ...flags])) {
        await sql.query(statement);
      }
      const status = await outboxSchemaStatus(sql, { with: asked });
      expect(status.parts.filter((p) => p.needed && !p.present)).toEqual([]);
      expect(status.version).toBe(status.latest);
      expect(status.latest).toBe(11);
      // Without the options, their steps are not made; with them, they all are.
      const optional = status.parts.filter(
        (p) => p.forOption !== null && p.forOption !== 'partitions',
      );
      expect(optional.every((p) => p.present === asked.length > 0)).toBe(true);
    } finally {
      db.close();
    }
  });

  it('prints the statements of steps 6, 7, 9 and 10 on PostgreSQL with --with', async () => {
    const text = (
      await print(['--dialect', 'postgres', '--with', OUTBOX_STEP_OPTIONS.join(',')])
    ).join('\n');
    expect(text).toContain('ADD COLUMN IF NOT EXISTS key_seq');
    expect(text).toContain('tenant_id varchar(128) GENERATED ALWAYS');
    expect(text).toContain('delivery_partition int2 GENERATED ALWAYS');
    expect(text).toContain('"outbox_claim_checks"');
    const plain = (await print(['--dialect', 'postgres'])).join('\n');
    expect(plain).not.toContain('tenant_id');
    expect(plain).not.toContain('delivery_partition');
  });
});

describe('outbox --delivery', () => {
  it("takes the app's delivery as written: poll (the default), log, external, and the older dispatcher", () => {
    const delivery = (value: string) => parseCliArgs(['stats', '--delivery', value]).delivery;
    expect(delivery('poll')).toBe('dispatcher');
    expect(delivery('log')).toBe('dispatcher');
    expect(delivery('dispatcher')).toBe('dispatcher');
    expect(delivery('external')).toBe('external');
    expect(parseCliArgs(['stats']).delivery).toBe('dispatcher');
    expect(() => parseCliArgs(['stats', '--delivery', 'debezium'])).toThrow(CliUsageError);
    expect(() => parseCliArgs(['stats', '--delivery', 'debezium'])).toThrow(/poll .* or external/);
  });

  it('refuses --with naming an option without a step of its own', () => {
    expect(() => parseCliArgs(['schema', 'migrate', '--with', 'tenant'])).toThrow(
      /--with takes a comma list of sequence, tenants, partitions, claimCheck/,
    );
  });
});
