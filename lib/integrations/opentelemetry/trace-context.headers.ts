import { context, propagation } from '@opentelemetry/api';

/**
 * The trace context of the caller's active span as message headers, for the module's
 * `headersProvider` option (`headersProvider: traceContextHeaders`). Written by the globally
 * registered propagator: W3C `traceparent` / `tracestate` (and `baggage` with a composite
 * propagator). Undefined when there is nothing to propagate, so untraced messages get no headers.
 */
export function traceContextHeaders(): Record<string, string> | undefined {
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return Object.keys(carrier).length === 0 ? undefined : carrier;
}
