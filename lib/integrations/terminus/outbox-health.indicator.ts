import { Injectable, Optional, type OnModuleInit } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import {
  HealthIndicatorService,
  type HealthIndicatorResult,
  type HealthIndicatorStatus,
} from '@nestjs/terminus';
import type { OutboxPublisher } from '../../publishers/outbox-publisher.interface';
import type { OutboxStats } from '../../store/ports/outbox-store.port';
import { describeError } from '../../internal/describe-error';
import { DEFAULT_OUTBOX_NAME, OUTBOX_OPTIONS } from '../../outbox.constants';
import { OutboxAdmin } from '../../module/admin/outbox.admin';
import type { ResolvedOutboxOptions } from '../../options/resolve-outbox-options';
import { OutboxDispatcher } from '../../dispatch/outbox.dispatcher';
import {
  resolveOutboxHealthOptions,
  type OutboxHealthOptions,
  type ResolvedOutboxHealthOptions,
} from './outbox-health.options';

/** What an outbox health check reports next to its status. */
export interface OutboxHealthDetails {
  /** `running`, `not started`, or `none` in an enqueue-only app (`workers: false`). */
  readonly dispatcher: 'running' | 'not started' | 'none';
  /** `reachable`, `unreachable`, or `not checked` when the publisher has no `ping()`. */
  readonly publisher: 'reachable' | 'unreachable' | 'not checked';
  /** Messages waiting for delivery, in flight included; null when the stats could not be read. */
  readonly pending: number | null;
  readonly dead: number | null;
  readonly oldestPendingAgeSeconds: number | null;
  /**
   * With log tailing: the WAL the replication slot keeps (null when unknown or not tailing),
   * and whether this process is the slot's reader.
   */
  readonly log?: {
    readonly retainedBytes: number | null;
    readonly reading: boolean;
    /**
     * How often the log's position was found lost (PostgreSQL: the slot dropped or
     * invalidated) and made again since the start; present where the source counts it.
     */
    readonly positionLosses?: number;
    /** What keeps the log from being read now (a missing or invalidated slot), when anything. */
    readonly problem?: string;
  };
  /** Why the check is down (absent when up). */
  readonly problems?: readonly string[];
}

class Timeout extends Error {}

/** Rejects with `Timeout` after `ms`; the work itself is left to finish on its own. */
async function within<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Timeout(`${what} took longer than ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([work, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A `@nestjs/terminus` health indicator for the outbox: the dispatcher is started, the
 * publisher's broker answers its `ping()`, and the backlog's age and the dead letters are within
 * limits. Add it to the providers of the module of your health controller (with `TerminusModule`
 * imported) and call `isHealthy('outbox', { maxDead: 0 })` in a `HealthCheckService.check()`.
 */
@Injectable()
export class OutboxHealthIndicator implements OnModuleInit {
  private publisher: OutboxPublisher | undefined;
  private reading: { readonly at: number; readonly stats: Promise<OutboxStats> } | undefined;

  constructor(
    private readonly health: HealthIndicatorService,
    private readonly outbox: OutboxAdmin,
    private readonly moduleRef: ModuleRef,
    // Absent in an enqueue-only app (workers: false).
    @Optional() private readonly dispatcher?: OutboxDispatcher,
  ) {}

  onModuleInit(): void {
    // The module's resolved options are not exported; the publisher is looked up, not injected,
    // in the default instance (the one whose OutboxAdmin and dispatcher are injected here).
    const all = this.moduleRef.get<ResolvedOutboxOptions>(OUTBOX_OPTIONS, {
      strict: false,
      each: true,
    });
    const options = all.find((o) => o.name === DEFAULT_OUTBOX_NAME) ?? all[0];
    this.publisher = options?.publisher;
  }

  /** Checks the outbox; resolves to a `down` result (never throws) when something is wrong. */
  async isHealthy<const Key extends string = 'outbox'>(
    key: Key = 'outbox' as Key,
    options?: OutboxHealthOptions,
  ): Promise<HealthIndicatorResult<Key, HealthIndicatorStatus, OutboxHealthDetails>> {
    const limits = resolveOutboxHealthOptions(options);
    const problems: string[] = [];

    let dispatcher: OutboxHealthDetails['dispatcher'] = 'none';
    if (this.dispatcher !== undefined) {
      const status = this.dispatcher.status();
      dispatcher = status.started ? 'running' : 'not started';
      if (dispatcher === 'not started' && limits.requireDispatcher) {
        problems.push('the dispatcher is not started (autoStart: false, or it was stopped)');
      }
      if (
        limits.maxRunMs !== null &&
        status.runningForMs !== null &&
        status.runningForMs > limits.maxRunMs
      ) {
        problems.push(
          `the dispatcher's current run has lasted ${Math.round(status.runningForMs / 1_000)} s, over the limit of ${limits.maxRunMs / 1_000} s (stuck?)`,
        );
      }
      if (status.stalledDatabaseCall !== null) {
        problems.push(
          `a dispatcher ${status.stalledDatabaseCall} is still waiting for the database after its timeout`,
        );
      }
    }

    const [publisher, stats] = await Promise.all([
      this.ping(limits, problems),
      this.stats(limits, problems),
    ]);

    const pending = stats === undefined ? null : stats.pending + stats.leased;
    const oldestMs = stats?.oldestPendingAgeMs ?? null;
    if (
      limits.maxOldestPendingAgeMs !== null &&
      oldestMs !== null &&
      oldestMs > limits.maxOldestPendingAgeMs
    ) {
      problems.push(
        `the oldest pending message is ${Math.round(oldestMs / 1_000)} s old, over the limit of ${limits.maxOldestPendingAgeMs / 1_000} s`,
      );
    }
    if (limits.maxDead !== null && stats !== undefined && stats.dead > limits.maxDead) {
      problems.push(`${stats.dead} dead-lettered message(s), over the limit of ${limits.maxDead}`);
    }

    const log = await this.logLag(limits, problems);
    const details: OutboxHealthDetails = {
      dispatcher,
      publisher,
      pending,
      dead: stats?.dead ?? null,
      oldestPendingAgeSeconds: oldestMs === null ? null : oldestMs / 1_000,
      ...(log === undefined ? {} : { log }),
    };
    const session = this.health.check(key);
    return problems.length === 0
      ? session.up({ ...details })
      : session.down({ ...details, problems });
  }

  private async ping(
    limits: ResolvedOutboxHealthOptions,
    problems: string[],
  ): Promise<OutboxHealthDetails['publisher']> {
    const publisher = this.publisher;
    if (publisher?.ping === undefined) return 'not checked';
    const controller = new AbortController();
    try {
      await within(publisher.ping(controller.signal), limits.pingTimeoutMs, 'the ping');
      return 'reachable';
    } catch (error) {
      controller.abort(error);
      problems.push(`the publisher's broker is unreachable: ${describeError(error)}`);
      return 'unreachable';
    }
  }

  /** The replication slot's lag, when the dispatcher tails the log. */
  private async logLag(
    limits: ResolvedOutboxHealthOptions,
    problems: string[],
  ): Promise<OutboxHealthDetails['log']> {
    if (this.dispatcher === undefined) return undefined;
    let lag;
    try {
      lag = await within(this.dispatcher.logLagStatus(), limits.statsTimeoutMs, 'the log lag');
    } catch (error) {
      problems.push(`the replication slot's lag could not be read: ${describeError(error)}`);
      return { retainedBytes: null, reading: false };
    }
    if (lag === null) return undefined;
    const max = limits.maxLogRetainedBytes;
    if (max !== null && lag.retainedBytes !== null && lag.retainedBytes > max) {
      problems.push(
        `the replication slot keeps ${lag.retainedBytes} bytes of WAL, over the limit of ${max} (is a reader running? see "outbox log status")`,
      );
    }
    if (lag.problem != null) {
      problems.push(`log tailing cannot read the log: ${lag.problem} (see "outbox log status")`);
    }
    return {
      retainedBytes: lag.retainedBytes,
      reading: lag.active,
      ...(lag.positionLosses === undefined ? {} : { positionLosses: lag.positionLosses }),
      ...(lag.problem == null ? {} : { problem: lag.problem }),
    };
  }

  private async stats(
    limits: ResolvedOutboxHealthOptions,
    problems: string[],
  ): Promise<OutboxStats | undefined> {
    const now = Date.now();
    let reading = this.reading;
    if (reading === undefined || now - reading.at > limits.statsMaxAgeMs) {
      // One reading shared by the checks that overlap it; a failed one is not reused.
      const stats = this.outbox.stats();
      reading = { at: now, stats };
      this.reading = reading;
      const current = reading;
      stats.catch(() => {
        if (this.reading === current) this.reading = undefined;
      });
    }
    try {
      return await within(reading.stats, limits.statsTimeoutMs, 'reading the outbox stats');
    } catch (error) {
      problems.push(`the outbox stats could not be read: ${describeError(error)}`);
      return undefined;
    }
  }
}
