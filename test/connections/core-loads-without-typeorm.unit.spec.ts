// An app on a plain driver or Kysely (`connection: pgOutbox(pool)`, `mysql2Outbox(pool)`,
// `betterSqlite3Outbox(db)`, `kyselyOutbox(db)`) need not install TypeORM: the core and those
// subpaths must load without it (here, loading it throws), and the driver subpaths without
// their driver.

const NOT_LOADED = [
  'typeorm',
  '@nestjs/typeorm',
  'pg',
  'mysql2',
  'mysql2/promise',
  'better-sqlite3',
];

describe('the core loads without TypeORM', () => {
  it('nestjs-outbox and its driver subpaths load while typeorm and the drivers cannot be loaded', () => {
    jest.isolateModules(() => {
      for (const library of NOT_LOADED) {
        jest.doMock(library, () => {
          throw new Error(`${library} was loaded`);
        });
      }
      /* eslint-disable @typescript-eslint/no-require-imports */
      const core = require('../../lib') as Record<string, unknown>;
      const pg = require('../../lib/connections/pg') as Record<string, unknown>;
      const mysql2 = require('../../lib/connections/mysql2') as Record<string, unknown>;
      const sqlite = require('../../lib/connections/better-sqlite3') as Record<string, unknown>;
      /* eslint-enable @typescript-eslint/no-require-imports */
      expect(typeof core.OutboxModule).toBe('function');
      expect(typeof core.OutboxService).toBe('function');
      expect(typeof pg.pgOutbox).toBe('function');
      expect(typeof mysql2.mysql2Outbox).toBe('function');
      expect(typeof sqlite.betterSqlite3Outbox).toBe('function');
    });
  });

  it('nestjs-outbox/inbox loads, and registers on a connection, without TypeORM', () => {
    jest.isolateModules(() => {
      for (const library of NOT_LOADED) {
        jest.doMock(library, () => {
          throw new Error(`${library} was loaded`);
        });
      }
      /* eslint-disable @typescript-eslint/no-require-imports */
      const inbox = require('../../lib/inbox') as typeof import('../../lib/inbox');
      const pg = require('../../lib/connections/pg') as typeof import('../../lib/connections/pg');
      /* eslint-enable @typescript-eslint/no-require-imports */
      const pool = {
        connect: () => Promise.reject(new Error('not used')),
        query: () => Promise.reject(new Error('not used')),
      };
      const connection = pg.pgOutbox(pool);
      const module = inbox.InboxModule.forRoot({ connection });
      expect(module.providers?.length).toBeGreaterThan(0);
      expect(new inbox.Inbox(connection)).toBeInstanceOf(inbox.Inbox);
    });
  });

  it('nestjs-outbox/kysely loads Kysely (the app has it) but neither TypeORM nor a driver', () => {
    jest.isolateModules(() => {
      for (const library of NOT_LOADED) {
        jest.doMock(library, () => {
          throw new Error(`${library} was loaded`);
        });
      }
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const kysely = require('../../lib/connections/kysely') as Record<string, unknown>;
      expect(typeof kysely.kyselyOutbox).toBe('function');
    });
  });
});
