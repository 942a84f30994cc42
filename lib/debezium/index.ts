/**
 * `nestjs-outbox/debezium`: delivery by Debezium's outbox event router on Kafka Connect
 * (`delivery: 'external'`): the connector's configuration for the outbox table. No optional
 * peer. See docs/debezium.md.
 */
export {
  debeziumConnectorConfig,
  DEBEZIUM_HEADERS_HEADER,
  type DebeziumConnectorDefinition,
  type DebeziumConnectorKind,
  type DebeziumConnectorOptions,
  type DebeziumDatabaseOptions,
} from '../store/schema/debezium-connector-config';
