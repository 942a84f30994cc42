import { outboxStoreConformance } from '../store/outbox-store.conformance';
import { prismaTarget } from './prisma-targets';

// prismaOutbox(prisma) on PostgreSQL (adapter-pg), MariaDB (adapter-mariadb) and SQLite
// (adapter-better-sqlite3): the store conformance suite through Prisma's raw queries, for the
// outbox's own interactive transactions and for the app's.
outboxStoreConformance(prismaTarget('postgres'), ['postgres']);
outboxStoreConformance(prismaTarget('mariadb'), ['mariadb']);
outboxStoreConformance(prismaTarget('sqlite'), []);
