// The ORM subpaths are optional: the core must load without Drizzle, MikroORM or Prisma, the
// MikroORM and Prisma subpaths name only types (they load neither the ORM nor a driver), and the
// Drizzle subpath loads drizzle-orm (its classes tell a transaction apart) but no driver.

const ORM_PACKAGES = [
  'drizzle-orm',
  'drizzle-orm/pg-core',
  'drizzle-orm/mysql-core',
  'drizzle-orm/sqlite-core',
  '@mikro-orm/core',
  '@mikro-orm/knex',
  '@mikro-orm/postgresql',
  '@mikro-orm/mariadb',
  '@mikro-orm/better-sqlite',
  '@prisma/client',
  '@prisma/adapter-pg',
  '@prisma/adapter-mariadb',
  '@prisma/adapter-better-sqlite3',
  'drizzle-orm/libsql',
] as const;
const DRIVER_PACKAGES = [
  'pg',
  'mysql2',
  'mysql2/promise',
  'better-sqlite3',
  'mariadb',
  '@libsql/client',
  'libsql',
] as const;

function refuse(names: readonly string[]): void {
  for (const name of names) {
    jest.doMock(name, () => {
      throw new Error(`${name} was loaded`);
    });
  }
}

describe('ORM subpaths load only what they must', () => {
  it('the core loads while no ORM can be loaded', () => {
    jest.isolateModules(() => {
      refuse([...ORM_PACKAGES, ...DRIVER_PACKAGES, 'typeorm', '@nestjs/typeorm']);
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const core = require('../../lib') as Record<string, unknown>;
      expect(typeof core.OutboxModule).toBe('function');
    });
  });

  it.each([
    ['mikro-orm', 'mikroOrmOutbox'],
    ['prisma', 'prismaOutbox'],
  ])('lib/connections/%s loads without its ORM or a driver', (folder, factory) => {
    jest.isolateModules(() => {
      refuse([...ORM_PACKAGES, ...DRIVER_PACKAGES]);
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const subpath = require(`../../lib/connections/${folder}`) as Record<string, unknown>;
      expect(typeof subpath[factory]).toBe('function');
    });
  });

  it('lib/connections/drizzle loads drizzle-orm but no driver', () => {
    jest.isolateModules(() => {
      // The cases above leave their refusals registered.
      for (const name of ORM_PACKAGES) jest.dontMock(name);
      refuse(DRIVER_PACKAGES);
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const subpath = require('../../lib/connections/drizzle') as Record<string, unknown>;
      expect(typeof subpath.drizzleOutbox).toBe('function');
    });
  });
});
