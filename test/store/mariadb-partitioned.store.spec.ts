import { TEST_DATABASES } from '../support/databases';
import { outboxStoreConformance, typeormOn } from './outbox-store.conformance';

// The store conformance suite on a time-partitioned MariaDB table (RANGE COLUMNS on created_at,
// the <table>_ids guard in place of UNIQUE (message_id)): all as on the plain table.
const db = TEST_DATABASES.find((d) => d.name === 'mariadb');
if (db === undefined) throw new Error('no mariadb test database');

outboxStoreConformance(
  { ...typeormOn(db), name: 'typeorm-mariadb-partitioned', partitioning: { interval: 'day' } },
  ['mariadb'],
);
