import { connectionConformanceCases, type ConnectionConformanceTarget } from '../../lib/testing';
import { describeWith, type ServiceName } from '../support/services';
import {
  betterSqlite3Target,
  drizzleTarget,
  kyselyTarget,
  mikroOrmTarget,
  mysql2Target,
  pgTarget,
  prismaTarget,
  typeormTarget,
  type AnyDatabase,
} from './connection-targets';

// The exported connection conformance suite (nestjs-outbox/testing) on every connection the
// package ships, on every database each runs on here: what enqueue refuses, and a connection
// the database ends.

const on = (database: AnyDatabase): ServiceName[] => (database === 'sqlite' ? [] : [database]);
const DATABASES: readonly AnyDatabase[] = ['postgres', 'mariadb', 'sqlite'];

type Entry = readonly [ConnectionConformanceTarget<never>, readonly ServiceName[]];
const entry = <Tx>(target: ConnectionConformanceTarget<Tx>, services: readonly ServiceName[]) =>
  [target as unknown as ConnectionConformanceTarget<never>, services] as Entry;

const targets: readonly Entry[] = [
  entry(pgTarget(), ['postgres']),
  entry(mysql2Target(), ['mariadb']),
  entry(betterSqlite3Target(), []),
  ...DATABASES.flatMap((database) => [
    entry(typeormTarget(database), on(database)),
    entry(kyselyTarget(database), on(database)),
    entry(drizzleTarget(database), on(database)),
    entry(mikroOrmTarget(database), on(database)),
    entry(prismaTarget(database), on(database)),
  ]),
];

for (const [target, services] of targets) {
  describeWith(services, `connection conformance [${target.name}]`, () => {
    for (const c of connectionConformanceCases(target)) it(c.name, () => c.run(target), 60_000);
  });
}
