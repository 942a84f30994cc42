// nestjs-outbox/cloudevents: messages sent as CloudEvents 1.0 (docs/publishers.md, "CloudEvents").
// Loads the `cloudevents` SDK, an optional peer.
export { cloudEvents } from './outbox-cloud-events';
export {
  resolveCloudEventsOptions,
  type CloudEventsOptions,
  type ResolvedCloudEventsOptions,
} from './cloud-events.options';
export {
  CLOUDEVENTS_JSON_CONTENT_TYPE,
  type BinaryCloudEvent,
  type CloudEventsMode,
  type EncodedCloudEvent,
  type OutboxCloudEvents,
  type StructuredCloudEvent,
} from '../../publishers/cloud-events/outbox-cloud-events.port';
