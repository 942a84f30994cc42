/**
 * Header naming one publish of a message (it differs on every attempt of the same message). A
 * `basic.return` carries the message's headers back, so this is how a return is matched to the
 * exact publish it answers. Consumers deduplicate on `x-outbox-message-id`, not on this.
 * It also marks a message as sent by `RabbitMqPublisher` (see `RabbitMqOutboxDeserializer`).
 */
export const RABBITMQ_PUBLISH_ID_HEADER = 'x-outbox-publish-id';
