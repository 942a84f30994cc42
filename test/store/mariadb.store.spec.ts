import { TEST_DATABASES } from '../support/databases';
import { outboxStoreConformance, typeormOn } from './outbox-store.conformance';

const db = TEST_DATABASES.find((d) => d.name === 'mariadb');
if (db === undefined) throw new Error('no mariadb test database');

outboxStoreConformance(typeormOn(db), ['mariadb']);
