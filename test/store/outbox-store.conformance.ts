import type { QueryRunner } from 'typeorm';
import { typeormSqlPort, typeormSqlRunner } from '../../lib/typeorm/typeorm.sql-port';
import { storeConformanceCases, type StoreConformanceTarget } from '../../lib/testing';
import { uniqueTable, type TestDatabase } from '../support/databases';
import { describeWith } from '../support/services';

// The exported store conformance suite (nestjs-outbox/testing) on the TypeORM SQL port, once per
// test database: what the dispatcher relies on from a store, asserted on the table's rows.

/** The TypeORM port on a fresh DataSource of `db`; the caller's transactions are TypeORM's. */
export function typeormOn(db: TestDatabase): StoreConformanceTarget {
  return {
    name: `typeorm-${db.name}`,
    async setUp() {
      // `open` makes a table of its own, which the cases leave alone: they make theirs.
      const table = uniqueTable('outbox_sc');
      const dataSource = await db.open(table);
      return {
        sql: typeormSqlPort(dataSource),
        inTransaction: (work) =>
          dataSource.transaction((manager) =>
            work(typeormSqlRunner(manager.queryRunner as QueryRunner)),
          ),
        tearDown: () => db.close(dataSource, table),
      };
    },
  };
}

/** Runs every case of the suite on `target` (skipped when `services` are not reachable). */
export function outboxStoreConformance(
  target: StoreConformanceTarget,
  services: Parameters<typeof describeWith>[0] = [],
): void {
  describeWith(services, `OutboxStore conformance [${target.name}]`, () => {
    for (const c of storeConformanceCases()) it(c.name, () => c.run(target), 30_000);
  });
}
