// nestjs-outbox/testing: helpers for testing your own code that uses the outbox.
export {
  RecordingPublisher,
  type RecordingFailure,
  type RecordingFailureOptions,
  type RecordingMatcher,
} from './recording.publisher';
export { clearOutbox } from './clear-outbox';
export {
  publisherConformanceCases,
  type PublisherConformanceCase,
  type PublisherConformanceFixture,
  type PublisherConformanceTarget,
  type PublisherConformanceTimings,
} from './publisher-conformance';
export {
  storeConformanceCases,
  type StoreConformanceCase,
  type StoreConformanceFixture,
  type StoreConformanceTarget,
} from './store-conformance';
export {
  connectionConformanceCases,
  type ConnectionConformanceCase,
  type ConnectionConformanceFixture,
  type ConnectionConformanceTarget,
  type ConnectionConformanceWithout,
} from './connection-conformance';
export {
  FaultProxy,
  type FaultProxyCut,
  type FaultProxyEndpoint,
  type FaultProxyOptions,
} from './fault.proxy';
export {
  DispatcherProcess,
  reportDispatcherReady,
  type DispatcherProcessExit,
  type DispatcherProcessOptions,
} from './dispatcher.process';
export {
  arrivalCounts,
  assertDelivery,
  checkDelivery,
  describeDeliveryReport,
  firstArrivalsByKey,
  type AllowedDuplicates,
  type CommittedMessage,
  type DeliveryCheckInput,
  type DeliveryReport,
  type DuplicatedMessage,
  type OrderViolation,
  type ReceivedMessage,
} from './delivery-check';
export {
  faultKitCases,
  faultKitEndpoints,
  faultKitEnv,
  type FaultKitCase,
  type FaultKitEndpoints,
  type FaultKitFixture,
  type FaultKitMessage,
  type FaultKitTarget,
} from './fault-kit';
// The connection SPI, beside the suite that proves a connection: what a connection of your own
// implements (docs/testing.md, "Proving a connection").
export type { OutboxConnection } from '../store/ports/outbox-connection';
export type {
  OneTripStatement,
  SqlListenLost,
  SqlPort,
  SqlResult,
  SqlRow,
  SqlRunner,
  SqlSession,
} from '../store/ports/sql-port';
