import { outboxStoreConformance } from '../store/outbox-store.conformance';
import { TEST_DATABASES } from '../support/databases';
import { kyselyTarget } from './driver-targets';

// The Kysely port on each test database (OUTBOX_TEST_DATABASES narrows them), through the
// dialect an app on that database uses: PostgresDialect over pg, MysqlDialect over mysql2,
// SqliteDialect over better-sqlite3.
for (const db of TEST_DATABASES) {
  outboxStoreConformance(kyselyTarget(db.name), db.service === null ? [] : [db.service]);
}
