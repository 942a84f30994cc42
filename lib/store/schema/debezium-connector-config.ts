import { refuseUnknownCallOptions } from '../../internal/known-keys';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { assertIdentifier, MAX_TABLE_NAME_LENGTH } from '../../internal/sql-identifier';
import { OUTBOX_HEADER_MESSAGE_ID, OUTBOX_HEADER_TYPE } from '../../outbox.constants';
import { OutboxMessages } from '../../outbox.messages';

/** The Debezium connectors that read the outbox table. */
export type DebeziumConnectorKind = 'postgres' | 'mysql' | 'mariadb';

/** Where the connector reads the database. Credentials are passed through, never printed by the CLI. */
export interface DebeziumDatabaseOptions {
  readonly hostname: string;
  readonly port: number;
  readonly user: string;
  /**
   * The password, or a Kafka Connect config-provider reference such as
   * `${file:/opt/connect/secrets.properties:outbox.password}`. @default a placeholder to replace
   */
  readonly password?: string;
  /** The database (PostgreSQL) or schema/database holding the table (MySQL/MariaDB). */
  readonly dbname: string;
}

/** What `debeziumConnectorConfig()` builds a connector from. */
export interface DebeziumConnectorOptions {
  readonly connector: DebeziumConnectorKind;
  readonly database: DebeziumDatabaseOptions;
  /** The outbox table, as the module's `tableName`. @default 'outbox' */
  readonly tableName?: string;
  /** PostgreSQL schema of the table. @default 'public' */
  readonly schema?: string;
  /** The connector's name in Kafka Connect. @default 'outbox-<tableName>' */
  readonly name?: string;
  /**
   * Debezium's `topic.prefix` (its logical server name: the prefix of its own topics and
   * metrics, not of the outbox topics, which are the messages' `topic`). @default 'outbox'
   */
  readonly topicPrefix?: string;
  /**
   * Which rows the connector sends when it first starts: `'new'`, only rows committed from then
   * on (`snapshot.mode` `no_data`); `'undelivered'`, first the rows the module's dispatcher has
   * not delivered (pending or waiting, in id order), then the new ones: the cut-over from the
   * dispatcher (docs/debezium.md). @default 'new'
   */
  readonly startWith?: 'new' | 'undelivered';
  /** PostgreSQL replication slot. @default 'dbz_<tableName>' */
  readonly slotName?: string;
  /** PostgreSQL publication. @default 'dbz_<tableName>' */
  readonly publicationName?: string;
  /** MySQL/MariaDB: the replica's server id, unique among the server's replicas. @default 184054 */
  readonly serverId?: number;
  /**
   * MySQL/MariaDB: the Kafka bootstrap servers for the connector's schema history topic.
   * Required for those connectors.
   */
  readonly schemaHistoryBootstrapServers?: string;
  /** Partitions of the topics the connector creates for the messages. @default 3 */
  readonly topicPartitions?: number;
  /** Replication factor of those topics. @default 1 */
  readonly topicReplicationFactor?: number;
}

/** A Kafka Connect connector: what `POST /connectors` takes. */
export interface DebeziumConnectorDefinition {
  readonly name: string;
  readonly config: Readonly<Record<string, string>>;
}

/** The Kafka header that carries the row's `headers` column (its JSON text, as one header). */
export const DEBEZIUM_HEADERS_HEADER = 'x-outbox-headers';

const PASSWORD_PLACEHOLDER = '${file:/opt/kafka/config/outbox-db.properties:password}';

function fail(option: string, problem: string, fix: string): never {
  throw new OutboxOptionsError(
    OutboxMessages.optionInvalid(option, problem, fix, 'debeziumConnectorConfig'),
    option,
  );
}

// Slot and publication names: PostgreSQL allows lower-case letters, digits and '_' in slot names.
function slotNameOf(value: string, option: string): string {
  if (!/^[a-z0-9_]{1,63}$/.test(value)) {
    fail(
      option,
      `${JSON.stringify(value)} is not a valid slot or publication name`,
      "Use 1 to 63 lower-case letters, digits or '_'.",
    );
  }
  return value;
}

function positiveInteger(value: number | undefined, fallback: number, option: string): number {
  const n = value ?? fallback;
  if (!Number.isInteger(n) || n < 1 || n > 4_294_967_295) {
    fail(option, `${String(n)} is not a positive whole number`, 'Pass a whole number from 1.');
  }
  return n;
}

/**
 * The Kafka Connect configuration of a Debezium connector that delivers the outbox table with
 * Debezium's outbox event router, for an app whose `OutboxModule` has `delivery: 'external'`:
 * - the record key is the message key (so a key's messages share a partition, in commit order);
 * - the topic is the message's `topic`, as it is (no prefix);
 * - the value is the JSON payload, as the text the module wrote (`StringConverter`);
 * - headers: `x-outbox-message-id` (what the inbox deduplicates by, as with the module's own
 *   publishers), `x-outbox-type`, and the message's headers as one `x-outbox-headers` header
 *   holding their JSON object.
 * Binary payloads (`payload` as bytes) are not carried: the router reads one payload column.
 */
export function debeziumConnectorConfig(
  options: DebeziumConnectorOptions,
): DebeziumConnectorDefinition {
  refuseUnknownCallOptions('debeziumConnectorConfig()', options, {
    '': {
      connector: true,
      database: true,
      tableName: true,
      schema: true,
      name: true,
      topicPrefix: true,
      startWith: true,
      slotName: true,
      publicationName: true,
      serverId: true,
      schemaHistoryBootstrapServers: true,
      topicPartitions: true,
      topicReplicationFactor: true,
    } satisfies Record<keyof DebeziumConnectorOptions, true>,
    database: {
      hostname: true,
      port: true,
      user: true,
      password: true,
      dbname: true,
    } satisfies Record<keyof DebeziumDatabaseOptions, true>,
  });
  const { connector, database } = options;
  if (!isDebeziumConnector(connector)) {
    fail(
      'connector',
      `${JSON.stringify(connector)} is not a Debezium connector the outbox supports`,
      'Use postgres, mysql or mariadb.',
    );
  }
  const tableName = options.tableName ?? 'outbox';
  if (tableName.length > MAX_TABLE_NAME_LENGTH) {
    fail(
      'tableName',
      `"${tableName}" is too long`,
      `Use at most ${MAX_TABLE_NAME_LENGTH} characters.`,
    );
  }
  assertIdentifier(tableName, 'tableName');
  const topicPrefix = options.topicPrefix ?? 'outbox';
  if (!/^[A-Za-z0-9_.-]{1,200}$/.test(topicPrefix)) {
    fail(
      'topicPrefix',
      `${JSON.stringify(topicPrefix)} is not a valid topic prefix`,
      "Use letters, digits, '.', '_' or '-'.",
    );
  }
  const name = options.name ?? `outbox-${tableName}`;
  if (!/^[A-Za-z0-9_.-]{1,200}$/.test(name)) {
    fail(
      'name',
      `${JSON.stringify(name)} is not a valid connector name`,
      "Use letters, digits, '.', '_' or '-'.",
    );
  }
  const startWith = options.startWith ?? 'new';
  if (startWith !== 'new' && startWith !== 'undelivered') {
    fail('startWith', `${JSON.stringify(startWith)} is not a start`, "Use 'new' or 'undelivered'.");
  }
  const password = database.password ?? PASSWORD_PLACEHOLDER;

  const router: Record<string, string> = {
    transforms: 'outbox',
    'transforms.outbox.type': 'io.debezium.transforms.outbox.EventRouter',
    'transforms.outbox.table.field.event.id': 'message_id',
    'transforms.outbox.table.field.event.key': 'message_key',
    'transforms.outbox.table.field.event.payload': 'payload',
    'transforms.outbox.route.by.field': 'topic',
    // The message's topic as it is: the same topic the module's own publishers send to.
    'transforms.outbox.route.topic.replacement': '${routedByValue}',
    'transforms.outbox.table.fields.additional.placement': [
      `message_id:header:${OUTBOX_HEADER_MESSAGE_ID}`,
      `event_type:header:${OUTBOX_HEADER_TYPE}`,
      `headers:header:${DEBEZIUM_HEADERS_HEADER}`,
    ].join(','),
    // Rows are only inserted and deleted while Debezium delivers: an update means a dispatcher
    // is still running against the table, which would publish the message a second time.
    'transforms.outbox.table.op.invalid.behavior': 'warn',
    // Key and payload as the text the module wrote: the payload's JSON, unchanged.
    'key.converter': 'org.apache.kafka.connect.storage.StringConverter',
    'value.converter': 'org.apache.kafka.connect.storage.StringConverter',
    'header.converter': 'org.apache.kafka.connect.storage.SimpleHeaderConverter',
    'topic.creation.default.partitions': String(
      positiveInteger(options.topicPartitions, 3, 'topicPartitions'),
    ),
    'topic.creation.default.replication.factor': String(
      positiveInteger(options.topicReplicationFactor, 1, 'topicReplicationFactor'),
    ),
    // Deletes (the cleaner's, by age) are not messages.
    'tombstones.on.delete': 'false',
  };
  const common = {
    'tasks.max': '1',
    'database.hostname': database.hostname,
    'database.port': String(database.port),
    'database.user': database.user,
    'database.password': password,
    'topic.prefix': topicPrefix,
  };

  return DEBEZIUM_CONNECTORS[connector].definition(options, {
    name,
    tableName,
    topicPrefix,
    startWith,
    common,
    router,
  });
}

/** What every connector's configuration shares, checked. */
interface SharedConfig {
  readonly name: string;
  readonly tableName: string;
  readonly topicPrefix: string;
  readonly startWith: 'new' | 'undelivered';
  readonly common: Readonly<Record<string, string>>;
  readonly router: Readonly<Record<string, string>>;
}

/** What differs between the Debezium connectors (the CLI reads it too). */
export interface DebeziumConnector {
  /** Where DATABASE_URL leaves them out. */
  readonly defaultPort: number;
  readonly defaultUser: string;
  /**
   * Whether the table sits in a schema of its own (PostgreSQL); otherwise the connector's table
   * list names the database, which must then be an identifier.
   */
  readonly schemas: boolean;
  /** Whether the connector keeps the table's schema history in a Kafka topic (its brokers needed). */
  readonly schemaHistory: boolean;
  definition(options: DebeziumConnectorOptions, shared: SharedConfig): DebeziumConnectorDefinition;
}

const POSTGRES_CONNECTOR: DebeziumConnector = {
  defaultPort: 5432,
  defaultUser: 'postgres',
  schemas: true,
  schemaHistory: false,
  definition(options, { name, tableName, startWith, common, router }) {
    const { database } = options;
    const schema = options.schema ?? 'public';
    assertIdentifier(schema, 'schema');
    const table = `${schema}.${tableName}`;
    const defaultName = `dbz_${tableName.toLowerCase()}`.slice(0, 63);
    return {
      name,
      config: {
        'connector.class': 'io.debezium.connector.postgresql.PostgresConnector',
        ...common,
        'database.dbname': database.dbname,
        'plugin.name': 'pgoutput',
        'slot.name': slotNameOf(options.slotName ?? defaultName, 'slotName'),
        'publication.name': slotNameOf(options.publicationName ?? defaultName, 'publicationName'),
        // A publication of this table only, made by the connector if it is missing.
        'publication.autocreate.mode': 'filtered',
        'table.include.list': table,
        // Without it, a quiet outbox on a busy server never moves the slot forward: the slot
        // retains the server's WAL, and the slot's position never shows that the connector has
        // caught up (the cut-back procedure waits for it).
        'heartbeat.interval.ms': '10000',
        ...snapshot(startWith, table, `"${schema}"."${tableName}"`),
        ...router,
      },
    };
  },
};

const MYSQL_CONNECTOR: DebeziumConnector = {
  defaultPort: 3306,
  defaultUser: 'root',
  schemas: false,
  schemaHistory: true,
  definition(options, { name, tableName, topicPrefix, startWith, common, router }) {
    const { connector, database } = options;
    assertIdentifier(database.dbname, 'database.dbname');
    const bootstrap = options.schemaHistoryBootstrapServers;
    if (bootstrap === undefined || bootstrap.trim() === '') {
      fail(
        'schemaHistoryBootstrapServers',
        `the ${connector} connector keeps the table's schema history in a Kafka topic and needs its brokers`,
        'Pass the Kafka bootstrap servers, e.g. "kafka:9092".',
      );
    }
    const table = `${database.dbname}.${tableName}`;
    return {
      name,
      config: {
        'connector.class': 'io.debezium.connector.mysql.MySqlConnector',
        ...common,
        'database.server.id': String(positiveInteger(options.serverId, 184_054, 'serverId')),
        'database.include.list': database.dbname,
        'table.include.list': table,
        'include.schema.changes': 'false',
        'schema.history.internal.kafka.bootstrap.servers': bootstrap,
        'schema.history.internal.kafka.topic': `${topicPrefix}.schema-history`,
        'schema.history.internal.store.only.captured.tables.ddl': 'true',
        // BINARY(16) message ids as text (32 hex digits), so the id header is readable text.
        'binary.handling.mode': 'hex',
        ...snapshot(startWith, table, `\`${database.dbname}\`.\`${tableName}\``),
        ...router,
      },
    };
  },
};

/** The connectors by kind: MariaDB's is MySQL's. */
export const DEBEZIUM_CONNECTORS: Readonly<Record<DebeziumConnectorKind, DebeziumConnector>> = {
  postgres: POSTGRES_CONNECTOR,
  mysql: MYSQL_CONNECTOR,
  mariadb: MYSQL_CONNECTOR,
};

export function isDebeziumConnector(kind: unknown): kind is DebeziumConnectorKind {
  return (
    typeof kind === 'string' && Object.prototype.hasOwnProperty.call(DEBEZIUM_CONNECTORS, kind)
  );
}

function snapshot(
  startWith: 'new' | 'undelivered',
  table: string,
  quoted: string,
): Record<string, string> {
  if (startWith === 'new') return { 'snapshot.mode': 'no_data' };
  // The rows the dispatcher has not delivered, in id order (a key's order), then the log.
  return {
    'snapshot.mode': 'initial',
    'snapshot.select.statement.overrides': table,
    [`snapshot.select.statement.overrides.${table}`]: `SELECT * FROM ${quoted} WHERE status IN ('pending', 'waiting') ORDER BY id`,
  };
}
