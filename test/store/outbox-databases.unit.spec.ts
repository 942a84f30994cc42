import { OutboxOptionsError } from '../../lib';
import { OUTBOX_DATABASES, outboxDatabaseOfScheme } from '../../lib/store/outbox-databases';
import { outboxDatabase } from '../../lib/store/schema/outbox-table-ddl';

describe('the database registry', () => {
  it('refuses an unknown driver type naming every supported one, from the registry', () => {
    let error: unknown;
    try {
      outboxDatabase('oracle');
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(OutboxOptionsError);
    expect((error as OutboxOptionsError).message).toBe(
      'Database type "oracle" is not supported by nestjs-outbox: use postgres, mysql, mariadb, ' +
        'sqlite or better-sqlite3.',
    );
    expect(Object.keys(OUTBOX_DATABASES)).toEqual([
      'postgres',
      'mysql',
      'mariadb',
      'sqlite',
      'better-sqlite3',
    ]);
  });

  it('finds a database by its DATABASE_URL scheme', () => {
    expect(outboxDatabaseOfScheme('postgresql')?.dialect).toBe('postgres');
    expect(outboxDatabaseOfScheme('mariadb')?.dialect).toBe('mysql');
    expect(outboxDatabaseOfScheme('sqlite')?.dialect).toBe('sqlite');
    expect(outboxDatabaseOfScheme('oracle')).toBeUndefined();
  });
});
