import { outboxStoreConformance } from '../store/outbox-store.conformance';
import { mikroOrmTarget } from './mikro-orm-targets';

// mikroOrmOutbox(orm) on PostgreSQL, MariaDB and SQLite (@mikro-orm/better-sqlite): the store conformance suite through MikroORM's
// connection.execute, for the outbox's own transactions and for em.transactional's.
outboxStoreConformance(mikroOrmTarget('postgres'), ['postgres']);
outboxStoreConformance(mikroOrmTarget('mariadb'), ['mariadb']);
outboxStoreConformance(mikroOrmTarget('sqlite'), []);
