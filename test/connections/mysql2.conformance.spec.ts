import { outboxStoreConformance } from '../store/outbox-store.conformance';
import { mysql2Target } from './driver-targets';

// The mysql2 port: the store conformance suite on MariaDB (the MySQL store's SQL, its key locks
// and the insert id that tells a written idempotent message from one already there).
outboxStoreConformance(mysql2Target, ['mariadb']);
