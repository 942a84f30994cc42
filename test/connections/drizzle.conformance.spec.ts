import { outboxStoreConformance } from '../store/outbox-store.conformance';
import { drizzleExecuteTarget, drizzleTarget } from './drizzle-targets';

// drizzleOutbox(db) on PostgreSQL (node-postgres), MariaDB (mysql2) and SQLite (libsql): the
// store conformance suite with the enqueue in db.transaction's tx, then again with every statement of the store
// going through Drizzle's execute (the placeholder translation on the claim and settle SQL too).
outboxStoreConformance(drizzleTarget('postgres'), ['postgres']);
outboxStoreConformance(drizzleTarget('mariadb'), ['mariadb']);
outboxStoreConformance(drizzleExecuteTarget('postgres'), ['postgres']);
outboxStoreConformance(drizzleExecuteTarget('mariadb'), ['mariadb']);
outboxStoreConformance(drizzleTarget('sqlite'), []);
