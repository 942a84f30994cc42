// An app on node-postgres (`connection: pgOutbox(pool)`) need not install TypeORM: the core and
// `nestjs-outbox/pg` must load without it (here, loading it throws).

describe('the core loads without TypeORM', () => {
  it('nestjs-outbox and nestjs-outbox/pg load while typeorm cannot be loaded', () => {
    jest.isolateModules(() => {
      for (const library of ['typeorm', '@nestjs/typeorm', 'pg']) {
        jest.doMock(library, () => {
          throw new Error(`${library} was loaded`);
        });
      }
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const core = require('../../lib') as Record<string, unknown>;
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const pg = require('../../lib/orm/pg') as Record<string, unknown>;
      expect(typeof core.OutboxModule).toBe('function');
      expect(typeof core.OutboxService).toBe('function');
      expect(typeof pg.pgOutbox).toBe('function');
    });
  });
});
