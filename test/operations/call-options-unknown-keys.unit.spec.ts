import { OutboxOptionsError, routePublishers } from '../../lib';
import { kyselyOutbox, outboxKyselyMigration } from '../../lib/connections/kysely';
import { debeziumConnectorConfig } from '../../lib/debezium';
import { s3ClaimCheckStore } from '../../lib/integrations/s3';
import { logTailing, logTailingMigration } from '../../lib/log-tailing';
import { ensureOutboxConsoleAuditTable } from '../../lib/operations/console';
import { OutboxGapRepairModule } from '../../lib/operations/gap-repair';
import { claimCheckPayload } from '../../lib/inbox';
import {
  SequenceGuard,
  createInboxMigration,
  httpGapRepairClient,
  inboxTableDdl,
  inboxTableDropDdl,
} from '../../lib/inbox';
import {
  createOutboxArchiveMigration,
  createOutboxBinaryIdsMigration,
  createOutboxMigration,
  outboxAuditTableDdl,
  outboxMigrations,
} from '../../lib/schema';

// Issue 75, item 15: the functions that build migrations, statements or clients refuse an
// options key they do not read under their own name, before they build anything:
// `outboxMigrations({ table })` would otherwise migrate the default table `outbox`, and
// `httpGapRepairClient({ url, timeout })` ask without the timeout it was given.

function refusal(call: () => unknown): OutboxOptionsError {
  try {
    call();
  } catch (error) {
    if (error instanceof OutboxOptionsError) return error;
    throw error;
  }
  throw new Error('not refused');
}

describe('unknown option keys of the gap-repair route', () => {
  it('OutboxGapRepairModule.forRoot() refuses a key of neither the route nor the answer, and one in auditTable', () => {
    const misspelt = refusal(() =>
      OutboxGapRepairModule.forRoot({ unsafeAllowAnonymous: true, ratePerSecnd: 1 } as never),
    );
    expect(misspelt.option).toBe('ratePerSecnd');
    expect(misspelt.message).toMatch(
      /^Invalid OutboxGapRepairModule\.forRoot\(\) options: ratePerSecnd is not an option; did you mean ratePerSecond\?/,
    );
    const nested = refusal(() =>
      OutboxGapRepairModule.forRoot({
        unsafeAllowAnonymous: true,
        auditTable: { tablename: 'audit' },
      } as never),
    );
    expect(nested.option).toBe('auditTable.tablename');
    // Every key it reads still passes.
    expect(
      OutboxGapRepairModule.forRoot({
        path: '/internal/gap-repair',
        unsafeAllowAnonymous: true,
        ratePerSecond: 5,
        burst: 20,
        maxSequences: 100,
        resendAfterMs: 5_000,
        auditTable: { tableName: 'audit' },
      }).module,
    ).toBe(OutboxGapRepairModule);
  });
});

describe('unknown option keys of the schema, migration and inbox functions', () => {
  const table = { table: 'orders_outbox' } as never;

  it.each([
    ['outboxMigrations()', () => outboxMigrations(table)],
    ['createOutboxMigration()', () => createOutboxMigration(table)],
    ['createOutboxArchiveMigration()', () => createOutboxArchiveMigration(table)],
    ['createOutboxBinaryIdsMigration()', () => createOutboxBinaryIdsMigration(table)],
    ['outboxAuditTableDdl()', () => outboxAuditTableDdl('postgres', table)],
    ['inboxTableDdl()', () => inboxTableDdl('postgres', table)],
    ['inboxTableDropDdl()', () => inboxTableDropDdl('mysql', table)],
    ['createInboxMigration()', () => createInboxMigration(table)],
  ])('%s names itself, the key and the accepted keys', (subject, call) => {
    const error = refusal(call);
    expect(error.option).toBe('table');
    expect(error.message).toMatch(
      new RegExp(
        `^Invalid ${subject.replace(/[()]/g, '\\$&')} options: table is not an option\\. Accepted options: tableName, schema[,.]`,
      ),
    );
  });

  it('createOutboxBinaryIdsMigration() takes the table only (it reads no step option)', () => {
    expect(refusal(() => createOutboxBinaryIdsMigration({ online: true } as never)).option).toBe(
      'online',
    );
    expect(new (createOutboxBinaryIdsMigration({ tableName: 'orders_outbox' }))().name).toBe(
      'ConvertOutboxIdsToBinary_orders_outbox_1763800000200',
    );
  });

  it('httpGapRepairClient() refuses a misspelt timeout', () => {
    const error = refusal(() =>
      httpGapRepairClient({ url: 'http://127.0.0.1:1/gap-repair', timeout: 100 } as never),
    );
    expect(error.option).toBe('timeout');
    expect(error.message).toBe(
      'Invalid httpGapRepairClient() options: timeout is not an option; did you mean ' +
        'timeoutMs? Accepted options: url, headers, timeoutMs. Nothing was done.',
    );
  });

  it('new SequenceGuard() refuses a misspelt policy instead of accepting every gap', () => {
    const error = refusal(() => new SequenceGuard({ ongap: 'reject' } as never));
    expect(error.option).toBe('ongap');
    expect(error.message).toBe(
      'Invalid new SequenceGuard() options: ongap is not an option; did you mean onGap? ' +
        'Accepted options: onGap, holdMs, store. Nothing was done.',
    );
  });

  it('claimCheckPayload() refuses an unknown option before reading the message', async () => {
    const store = {
      get: () => Promise.reject(new Error('the store must not be read')),
    };
    await expect(
      claimCheckPayload(
        { content: Buffer.from('{}') },
        store as never,
        {
          payload: {},
        } as never,
      ),
    ).rejects.toMatchObject({
      constructor: OutboxOptionsError,
      option: 'payload',
      message: expect.stringContaining('Accepted options: data, signal.'),
    });
  });
});

describe('unknown option keys of the builders of the optional entry points', () => {
  it.each([
    ['logTailing()', () => logTailing({ slot: 'outbox_slot' } as never), 'slot'],
    [
      'logTailingMigration()',
      () => logTailingMigration({ tableName: 'outbox', publication: 'p' } as never),
      'publication',
    ],
    ['outboxKyselyMigration()', () => outboxKyselyMigration({ table: 'x' } as never), 'table'],
    [
      'kyselyOutbox()',
      () => kyselyOutbox({} as never, { dialect: 'postgres' } as never),
      'dialect',
    ],
    ['routePublishers()', () => routePublishers({ route: [] } as never), 'route'],
    [
      's3ClaimCheckStore()',
      () => s3ClaimCheckStore({ bucket: 'payloads', perfix: 'outbox/' } as never),
      'perfix',
    ],
    [
      'debeziumConnectorConfig()',
      () =>
        debeziumConnectorConfig({
          connector: 'postgres',
          database: { host: 'db', port: 5432, user: 'u', dbname: 'app' },
        } as never),
      'database.host',
    ],
  ])('%s refuses an unknown key, naming it', (subject, call, key) => {
    const error = refusal(call);
    expect(error.option).toBe(key);
    expect(error.message).toContain(`Invalid ${subject} options: ${key} is not an option`);
    expect(error.message).toContain('Accepted options: ');
  });

  it('ensureOutboxConsoleAuditTable() refuses before it touches the DataSource', async () => {
    const untouched = new Proxy(
      {},
      {
        get: () => {
          throw new Error('the DataSource must not be used');
        },
      },
    );
    await expect(
      ensureOutboxConsoleAuditTable(untouched as never, { table: 'audit' } as never),
    ).rejects.toMatchObject({ constructor: OutboxOptionsError, option: 'table' });
  });
});
