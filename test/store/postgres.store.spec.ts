import { createOutboxTable, tableNamesFor } from '../../lib/store/outbox-dialect';
import { postgresDropWaitingIndex } from '../../lib/store/postgres/postgres.sql';
import { TEST_DATABASES } from '../support/databases';
import { outboxStoreConformance, typeormOn } from './outbox-store.conformance';

const db = TEST_DATABASES.find((d) => d.name === 'postgres');
if (db === undefined) throw new Error('no postgres test database');

outboxStoreConformance(typeormOn(db), ['postgres']);

// A table made before schema step 5 has no index of waiting messages: the store then promotes
// by probing every advanced key, as before the index, and must keep every promise on it.
outboxStoreConformance(
  {
    ...typeormOn(db),
    name: 'typeorm-postgres, a table without the waiting index (before schema step 5)',
    async createTable(sql, tableName) {
      await createOutboxTable(sql, { tableName });
      await sql.query(postgresDropWaitingIndex(tableNamesFor('postgres', { tableName })));
    },
  },
  ['postgres'],
);
