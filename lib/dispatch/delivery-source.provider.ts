import type { Provider } from '@nestjs/common';
import { OUTBOX_DELIVERY_SOURCE, OUTBOX_OPTIONS } from '../outbox.constants';
import type { ResolvedOutboxOptions } from '../options/resolve-outbox-options';
import type { DeliverySourceFactory } from './delivery-source';
import { LogSource, logSweepIntervalMs } from './log/log-source';
import { NoSource } from './no-source';
import { PartitionSource } from './partitions/partition-source';
import { PollSource, type PollSettings } from './poll/poll-source';

/**
 * The one place the delivery mode is decided: from the resolved options, once per instance.
 * `delivery: 'external'` delivers nothing here; otherwise `dispatcher.observe` says whether new
 * rows come from the table's polls or from the database's log.
 */
export function chooseDeliverySource(options: ResolvedOutboxOptions): DeliverySourceFactory {
  if (options.delivery === 'external') return (_pipeline, context) => new NoSource(context);
  const observe = options.dispatcher.observe;
  if (observe !== 'poll') {
    // The log brings new messages; the table's poll, slower, brings back retries, promotions and
    // what the log's reader left to the table. Commit nudges and NOTIFY would only make the poll
    // race the reader for every new message: both correct, the poll a wasted claim. The first
    // sweep comes after one interval: what committed before the slot existed (a backlog from
    // polling days) waits that long; everything since is in the log.
    const sweep: PollSettings = {
      intervalMs: logSweepIntervalMs(observe),
      listen: false,
      commitNudges: false,
      claimAtStart: false,
    };
    return (pipeline, context) =>
      new LogSource(observe, pipeline, context, new PollSource(pipeline, context, sweep));
  }
  if (options.dispatcher.claims === 'partitions') {
    return (pipeline, context) => new PartitionSource(pipeline, context);
  }
  const { pollIntervalMs, listen } = options.dispatcher;
  return (pipeline, context) =>
    new PollSource(pipeline, context, {
      intervalMs: pollIntervalMs,
      listen,
      commitNudges: true,
      claimAtStart: true,
    });
}

/**
 * Whether the enqueue should NOTIFY: only a polling dispatcher LISTENs. With delivery elsewhere
 * none runs, and a log source reads new rows from the log, so a NOTIFY would wake no one.
 */
export function enqueueNotifies(options: ResolvedOutboxOptions): boolean {
  return (
    options.dispatcher.listen &&
    options.delivery === 'dispatcher' &&
    options.dispatcher.observe === 'poll'
  );
}

/** The instance's source, chosen once (see `chooseDeliverySource`). */
export const OUTBOX_DELIVERY_SOURCE_PROVIDER: Provider = {
  provide: OUTBOX_DELIVERY_SOURCE,
  inject: [OUTBOX_OPTIONS],
  useFactory: chooseDeliverySource,
};
