import { resolve } from 'node:path';
import { connect, type ChannelModel } from 'amqplib';
import { dropOutboxTables, ensureOutboxArchiveTable, outboxAuditTableDdl } from '../../lib/schema';
import { logTailingOf } from '../../lib/log-tailing/log-tailing.databases';
import { outboxDialectOf, tableNamesFor } from '../../lib/store/schema/outbox-table-ddl';
import {
  DispatcherProcess,
  faultKitCases,
  faultKitEnv,
  type FaultKitTarget,
} from '../../lib/testing';
import { objectsNamedAfter } from '../support/catalog';
import type { FaultKitChildConfig } from '../support/children/fault-kit-dispatcher';
import { useOutboxScope } from '../support/outbox-scope';
import { POLL_RUN_DATABASES } from '../support/sources';
import { describeWith, SERVICES } from '../support/services';
import { CLAIM_LOOP } from '../support/test-claims';

// The fault kit of nestjs-outbox/testing (docs/testing.md, "Fault kit") run as a user runs it:
// the module in a dispatcher process of its own (test/support/children/fault-kit-dispatcher.ts),
// RabbitMQ behind the kit's proxy, a consumer on the queue recording what arrives, on each
// database. SQLite is a file: no database link to cut, so those cases say so and are skipped.
// Each case's table has everything the outbox can make for it (every schema step, the archive,
// an audit table, MariaDB's binlog position), and its tear-down drops it all with
// dropOutboxTables: nothing named after the table is left once a case has run.
// In the slow project: about fourteen dispatcher processes take minutes on a busy machine.

const ROOT = resolve(__dirname, '../..');
const SCRIPT = resolve(__dirname, '../support/children/fault-kit-dispatcher.ts');
/** Transpiles the child's TypeScript once per change, not once per process. */
const REGISTER_TS = resolve(__dirname, '../support/children/register-ts.js');
const RABBITMQ_URL = `amqp://${process.env.RABBITMQ_USER ?? 'guest'}:${process.env.RABBITMQ_PASSWORD ?? 'guest'}@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;
/** A case boots one or two dispatcher processes. */
const CASE_TIMEOUT_MS = 240_000;
const ROLLBACK = new Error('the fault kit asked for a rollback');

for (const db of POLL_RUN_DATABASES) {
  const services =
    db.service === null ? (['rabbitmq'] as const) : ([db.service, 'rabbitmq'] as const);
  describeWith(services, `fault kit on ${db.name} + RabbitMQ`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_fk', options: CLAIM_LOOP });
    let starts = 0;
    let consumer: ChannelModel | undefined;

    beforeAll(async () => {
      consumer = await connect(RABBITMQ_URL);
    });
    afterAll(async () => {
      await consumer?.close();
    });

    /** The target: this project's module with the RabbitMQ publisher (`child` adds to its set-up). */
    const targetWith = (child: Partial<FaultKitChildConfig> = {}): FaultKitTarget => ({
      name: `${db.name} + RabbitMQ`,
      database: db.name === 'sqlite' ? undefined : SERVICES[db.name],
      broker: SERVICES.rabbitmq,
      messages: 400,
      outageMs: 1_500,
      async setUp() {
        const table = await scope.table();
        const dialect = outboxDialectOf(scope.ds.options.type);
        const audit = { tableName: `${table}_audit` };
        await ensureOutboxArchiveTable(scope.ds, { tableName: table });
        for (const statement of [
          ...outboxAuditTableDdl(dialect, audit),
          ...(dialect === 'mysql'
            ? (logTailingOf(dialect)?.ddl(tableNamesFor(dialect, { tableName: table }), {}) ?? [])
            : []),
        ])
          await scope.ds.query(statement);
        const writer = await scope.open({ table });
        const queue = `outbox-fk-${process.pid}-${table}`;
        const channel = await consumer!.createChannel();
        await channel.assertQueue(queue, { durable: false });
        const received: string[] = [];
        await channel.consume(
          queue,
          (message) => {
            if (message !== null) received.push(String(message.properties.messageId));
          },
          { noAck: true },
        );
        return {
          startDispatcher: (endpoints) => {
            const config: FaultKitChildConfig = {
              db: db.name,
              sqlitePath: db.name === 'sqlite' ? String(scope.ds.options.database) : undefined,
              table,
              queue,
              instanceId: `fault-kit-${++starts}`,
              ...child,
            };
            return DispatcherProcess.start({
              script: SCRIPT,
              cwd: ROOT,
              execArgv: ['-r', REGISTER_TS],
              env: {
                ...faultKitEnv(endpoints),
                OUTBOX_FAULT_KIT_CHILD: JSON.stringify(config),
              },
            });
          },
          async enqueue(messages, rollback) {
            await scope.ds
              .transaction(async (manager) => {
                await writer.outbox.enqueue(
                  messages.map((m) => ({ topic: queue, ...m })),
                  manager,
                );
                if (rollback) throw ROLLBACK;
              })
              .catch((error: unknown) => {
                if (error !== ROLLBACK) throw error;
              });
          },
          received: () => received,
          async tearDown() {
            await channel.deleteQueue(queue);
            await channel.close();
            await dropOutboxTables(scope.ds, { tableName: table, auditTable: audit });
            const left = await objectsNamedAfter(scope.ds, table);
            if (left.length > 0) throw new Error(`left after dropOutboxTables: ${left.join(', ')}`);
          },
        };
      },
    });

    const target = targetWith();
    for (const c of faultKitCases(target))
      (c.notApplicable === undefined ? it : it.skip)(c.name, () => c.run(target), CASE_TIMEOUT_MS);

    // The kit can fail: a publisher that reports every 40th message published without sending
    // it passes for a working one until the kit checks what arrived.
    if (db.name === 'postgres')
      it(
        'fails a set-up whose publisher loses messages, naming them',
        async () => {
          const broken = { ...targetWith({ dropEvery: 40 }), deliveryTimeoutMs: 5_000 };
          const [brokerCut] = faultKitCases(broken).filter((c) => c.name.startsWith('broker'));
          await expect(brokerCut?.run(broken)).rejects.toThrow(
            /after 5000 ms,\n\d+ lost: [0-9a-f-]{36}, /,
          );
        },
        CASE_TIMEOUT_MS,
      );
  });
}
