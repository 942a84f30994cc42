// nestjs-outbox/opentelemetry: trace context from enqueue to consumer (@opentelemetry/api, an
// optional peer dependency).
export { traceContextHeaders } from './trace-context.headers';
export { TracedPublisher, type TracedPublisherOptions } from './traced.publisher';
