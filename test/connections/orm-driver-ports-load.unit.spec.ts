// The plain-driver ports are optional: an app on node-postgres need not have mysql2 or
// better-sqlite3, so loading a port must load no driver (each driver here throws if loaded).
const DRIVERS = ['pg', 'mysql2', 'mysql2/promise', 'better-sqlite3'] as const;

describe('plain-driver SQL ports load no driver', () => {
  for (const entry of ['pg', 'mysql2', 'better-sqlite3'] as const) {
    it(`lib/connections/${entry} loads without loading a driver`, () => {
      jest.isolateModules(() => {
        for (const driver of DRIVERS) {
          jest.doMock(driver, () => {
            throw new Error(`${driver} was loaded`);
          });
        }
        // eslint-disable-next-line @typescript-eslint/no-require-imports
        const port = require(`../../lib/connections/${entry}`) as Record<string, unknown>;
        expect(Object.keys(port).sort()).toEqual(
          expect.arrayContaining([
            expect.stringMatching(/SqlPort$/),
            expect.stringMatching(/SqlRunner$/),
            // The module's `connection`: pgOutbox, mysql2Outbox, betterSqlite3Outbox.
            expect.stringMatching(/^[a-zA-Z0-9]+Outbox$/),
          ]),
        );
      });
    });
  }
});
