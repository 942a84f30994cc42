import { DataSource } from 'typeorm';
import { OutboxOptionsError, type OutboxModuleOptions, type OutboxPublisher } from '../../lib';
import { debeziumConnectorConfig, type DebeziumConnectorOptions } from '../../lib/debezium';
import { logTailing } from '../../lib/log-tailing';
import { resolveOutboxOptions } from '../../lib/options/resolve-outbox-options';

const dataSource = new DataSource({ type: 'better-sqlite3', database: ':memory:' });
const publisher: OutboxPublisher = { publish: () => Promise.resolve([]) };

function errorOf(options: OutboxModuleOptions): OutboxOptionsError {
  try {
    resolveOutboxOptions(options);
  } catch (error) {
    if (error instanceof OutboxOptionsError) return error;
    throw error;
  }
  throw new Error('expected an OutboxOptionsError');
}

describe("delivery: 'external' options", () => {
  it("defaults to the module's dispatcher, polling", () => {
    expect(resolveOutboxOptions({ dataSource, publisher }).delivery).toBe('poll');
  });

  it('needs no publisher with workers on', () => {
    const resolved = resolveOutboxOptions({ dataSource, delivery: 'external' });
    expect(resolved.delivery).toBe('external');
    expect(resolved.publisher).toBeUndefined();
  });

  it('rejects an unknown mode, saying which ones exist', () => {
    const error = errorOf({ dataSource, publisher, delivery: 'debezium' as 'external' });
    expect(error.option).toBe('delivery');
    expect(error.message).toMatch(
      /"debezium" is not a delivery mode.*'poll'.*logTailing\(\).*'external'/,
    );
  });

  it('rejects what no external engine would use: a publisher, partitioning, the archive', () => {
    expect(errorOf({ dataSource, delivery: 'external', publisher }).option).toBe('publisher');
    expect(
      errorOf({ dataSource, delivery: 'external', partitioning: { interval: 'day' } }).option,
    ).toBe('partitioning');
    expect(errorOf({ dataSource, delivery: 'external', cleaner: { archive: true } }).option).toBe(
      'cleaner.archive',
    );
  });

  it('rejects a log observer beside it (0.2 spelling): no dispatcher runs to read the log', () => {
    const error = errorOf({
      dataSource,
      delivery: 'external',
      dispatcher: { observe: logTailing() },
    });
    expect(error.option).toBe('dispatcher.observe');
    expect(error.message).toMatch(/Leave dispatcher.observe out/);
  });
});

describe('debeziumConnectorConfig', () => {
  const database = { hostname: 'db', port: 5432, user: 'debezium', dbname: 'shop' };

  it("routes the table's columns on PostgreSQL: id, key, topic, payload, type and headers", () => {
    const { name, config } = debeziumConnectorConfig({
      connector: 'postgres',
      database,
      tableName: 'orders_outbox',
      schema: 'app',
    });
    expect(name).toBe('outbox-orders_outbox');
    expect(config).toMatchObject({
      'connector.class': 'io.debezium.connector.postgresql.PostgresConnector',
      'plugin.name': 'pgoutput',
      'slot.name': 'dbz_orders_outbox',
      'publication.name': 'dbz_orders_outbox',
      'publication.autocreate.mode': 'filtered',
      'table.include.list': 'app.orders_outbox',
      'snapshot.mode': 'no_data',
      'transforms.outbox.type': 'io.debezium.transforms.outbox.EventRouter',
      'transforms.outbox.table.field.event.id': 'message_id',
      'transforms.outbox.table.field.event.key': 'message_key',
      'transforms.outbox.table.field.event.payload': 'payload',
      'transforms.outbox.route.by.field': 'topic',
      'transforms.outbox.route.topic.replacement': '${routedByValue}',
      'transforms.outbox.table.fields.additional.placement':
        'message_id:header:x-outbox-message-id,event_type:header:x-outbox-type,headers:header:x-outbox-headers',
      'key.converter': 'org.apache.kafka.connect.storage.StringConverter',
      'value.converter': 'org.apache.kafka.connect.storage.StringConverter',
    });
    // Never a password of its own: a config-provider reference until one is given.
    expect(config['database.password']).toMatch(/^\$\{file:/);
  });

  it('starts from the undelivered rows for the cut-over from the dispatcher', () => {
    const { config } = debeziumConnectorConfig({
      connector: 'postgres',
      database,
      startWith: 'undelivered',
    });
    expect(config['snapshot.mode']).toBe('initial');
    expect(config['snapshot.select.statement.overrides.public.outbox']).toBe(
      `SELECT * FROM "public"."outbox" WHERE status IN ('pending', 'waiting') ORDER BY id`,
    );
  });

  it('configures the MySQL connector (also for MariaDB) with its schema history', () => {
    const { config } = debeziumConnectorConfig({
      connector: 'mariadb',
      database: { ...database, port: 3306 },
      schemaHistoryBootstrapServers: 'kafka:9092',
      serverId: 7,
    });
    expect(config).toMatchObject({
      'connector.class': 'io.debezium.connector.mysql.MySqlConnector',
      'database.server.id': '7',
      'table.include.list': 'shop.outbox',
      'schema.history.internal.kafka.bootstrap.servers': 'kafka:9092',
    });
  });

  it.each<[string, Partial<DebeziumConnectorOptions>, string]>([
    ['an unknown connector', { connector: 'oracle' as 'postgres' }, 'connector'],
    ['a table name that is not an identifier', { tableName: 'x; drop' }, 'tableName'],
    ['a slot name PostgreSQL refuses', { slotName: 'Bad-Slot' }, 'slotName'],
    [
      'MySQL without schema-history brokers',
      { connector: 'mysql' },
      'schemaHistoryBootstrapServers',
    ],
  ])('rejects %s', (_, change, option) => {
    let caught: unknown;
    try {
      debeziumConnectorConfig({ connector: 'postgres', database, ...change });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(OutboxOptionsError);
    expect((caught as OutboxOptionsError).option).toBe(option);
  });
});
