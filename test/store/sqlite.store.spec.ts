import { TEST_DATABASES } from '../support/databases';
import { outboxStoreConformance, typeormOn } from './outbox-store.conformance';

const db = TEST_DATABASES.find((d) => d.name === 'sqlite');
if (db === undefined) throw new Error('no sqlite test database');

outboxStoreConformance(typeormOn(db), []);
