import { TEST_DATABASES } from '../support/databases';
import { outboxStoreConformance, typeormOn } from './outbox-store.conformance';

// The store conformance suite on a time-partitioned table (partitioning: docs/partitioning.md):
// the guard in place of UNIQUE (message_id), keys spread over partitions, all as on the plain table.
const db = TEST_DATABASES.find((d) => d.name === 'postgres');
if (db === undefined) throw new Error('no postgres test database');

outboxStoreConformance(
  { ...typeormOn(db), name: 'typeorm-postgres-partitioned', partitioning: { interval: 'day' } },
  ['postgres'],
);
