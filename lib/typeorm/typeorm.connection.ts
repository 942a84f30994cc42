import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import { OutboxError } from '../errors/outbox.error';
import { OutboxTransactionRequiredError } from '../errors/outbox-transaction-required.error';
import { OutboxMessages } from '../outbox.messages';
import type { OutboxConnection } from '../store/ports/outbox-connection';
import { TypeormCommitHook } from './typeorm-commit-hook';
import { typeormSqlPort, typeormSqlRunner } from './typeorm.sql-port';

/**
 * The outbox on a TypeORM DataSource: what `OutboxModule.forRoot({ dataSource })` builds. The
 * caller's transaction is the EntityManager of `dataSource.transaction(m => …)` or
 * `queryRunner.manager`; a commit wakes the local dispatcher through TypeORM's subscribers.
 */
export function typeormConnection(dataSource: DataSource): OutboxConnection<EntityManager> {
  const hook = new TypeormCommitHook(dataSource);
  return {
    sql: typeormSqlPort(dataSource),
    join(manager) {
      if (manager.queryRunner?.isTransactionActive !== true) {
        throw new OutboxTransactionRequiredError();
      }
      if (manager.connection !== dataSource) {
        throw new OutboxError(
          OutboxMessages.foreignTransaction(
            'EntityManager',
            'DataSource',
            'Pass a manager of the outbox DataSource.',
          ),
        );
      }
      return typeormSqlRunner(manager.queryRunner);
    },
    afterCommit(manager, wake) {
      hook.track(manager.queryRunner as QueryRunner, wake);
    },
    close() {
      hook.detach();
      return Promise.resolve();
    },
  };
}
