import { Test } from '@nestjs/testing';
import { OutboxError, OutboxModule, OutboxOptionsError } from '../../lib';
import { TEST_DATABASES, uniqueTable } from '../support/databases';

const sqlite = TEST_DATABASES.find((db) => db.name === 'sqlite');
if (sqlite === undefined) throw new Error('the sqlite test database is always available');

describe('bootstrap checks', () => {
  it('fails at bootstrap when the outbox table does not exist, naming the fix', async () => {
    const table = uniqueTable();
    const ds = await sqlite.open(table);
    try {
      const compile = Test.createTestingModule({
        imports: [
          OutboxModule.forRoot({ dataSource: ds, tableName: 'no_such_outbox', workers: false }),
        ],
      }).compile();
      await expect(compile).rejects.toBeInstanceOf(OutboxError);
      await expect(compile).rejects.toThrow(/"no_such_outbox" does not exist: run the migration/);
    } finally {
      await sqlite.close(ds, table);
    }
  });

  it('refuses the dispatcher on an in-memory SQLite database', async () => {
    const { DataSource } = await import('typeorm');
    const ds = new DataSource({ type: 'better-sqlite3', database: ':memory:' });
    await ds.initialize();
    const { ensureOutboxTable } = await import('../../lib');
    await ensureOutboxTable(ds);
    const publisher = { publish: () => Promise.resolve([]) };
    try {
      await expect(
        Test.createTestingModule({
          imports: [OutboxModule.forRoot({ dataSource: ds, publisher, autoStart: false })],
        }).compile(),
      ).rejects.toBeInstanceOf(OutboxOptionsError);
    } finally {
      await ds.destroy();
    }
  });
});
