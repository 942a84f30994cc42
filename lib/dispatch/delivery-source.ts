import type { SchedulerRegistry } from '@nestjs/schedule';
import type { OutboxBatchReport } from '../observers/outbox-observer.interface';
import type { ResolvedOutboxOptions } from '../options/resolve-outbox-options';
import type { OutboxLogLag } from '../store/ports/outbox-log-source.port';
import type { OutboxDeliveryPort } from '../store/ports/outbox-store.port';
import type { SqlPort } from '../store/ports/sql-port';
import type { DispatcherLog } from './dispatcher-log';
import type { DeliveryPipeline } from './pipeline/delivery-pipeline';
import type { CommitWatcher } from './poll/commit-watcher';

/** How a source stops: what it is still handling, and the connections it gives back. */
export interface SourceStop {
  /** Resolves once what the source took has been delivered and settled (or given back). */
  readonly idle: Promise<void>;
  /** Connections held for wake-ups, closing: each named for the shutdown's account. */
  readonly closing: readonly (readonly [what: string, done: Promise<unknown>])[];
}

/** When the source's last drain started and ended (monotonic and wall clock), for `status()`. */
export interface DrainTimes {
  readonly runningSince: number | undefined;
  readonly lastFinishedAt: number | undefined;
}

/**
 * Where a dispatcher's work comes from: the claim loop's polls (`PollSource`), the database's
 * log (`LogSource`, with a sweep of the table beside it), or nothing (`NoSource`: another engine
 * delivers). A source finds work and hands it to the `DeliveryPipeline` it was made with; it
 * never reaches back up to the dispatcher.
 */
export interface DeliverySource {
  /** Where new messages come from, with that source's settings, for the dispatcher's start line. */
  readonly description: string;
  /** False when nothing is delivered here (another engine reads the table). */
  readonly delivers: boolean;
  /** What becomes of the messages of a batch an abandoned shutdown left unsettled. */
  readonly unsettled: string;
  /** Checks what the source needs (module init): a missing server setting fails the start. */
  prepare(): Promise<void>;
  start(): Promise<void>;
  /** Look for work now; coalesces with a look already running. */
  wake(): void;
  /** Runs until nothing is due; resolves to the number of messages published. */
  drain(): Promise<number>;
  /** Leases, publishes and settles one batch now. */
  runOnce(): Promise<OutboxBatchReport>;
  stop(): SourceStop;
  /** What an abandoned shutdown leaves running of this source (besides the batches). */
  stillRunning(idleDone: boolean): string[];
  readonly drainTimes: DrainTimes;
  /** How far the log's durable position is behind; null for a source that reads no log. */
  lag(): Promise<OutboxLogLag | null>;
}

/** What every source may use besides the pipeline. */
export interface SourceContext {
  readonly options: ResolvedOutboxOptions;
  readonly store: OutboxDeliveryPort;
  /** The instance's SQL port: the owner lock's session, and what a log source reads the server's settings through. */
  readonly sql: SqlPort | undefined;
  /** The app's scheduler registry, when it imported ScheduleModule.forRoot(). */
  readonly registry: SchedulerRegistry | undefined;
  readonly commits: CommitWatcher<unknown>;
  readonly log: DispatcherLog;
}

/** Makes the source the options chose (see `chooseDeliverySource`). */
export type DeliverySourceFactory = (
  pipeline: DeliveryPipeline,
  context: SourceContext,
) => DeliverySource;
