import { ClaimCheckLedgerSlot } from '../publishers/claim-check/claim-check-ledger.port';
import type { ClaimCheckStore } from '../publishers/claim-check/claim-check-store.interface';
import type { OutboxClaimCheckOptions } from './outbox.options';
import { OUTBOX_DEFAULTS } from './outbox-defaults';
import { checks, fail, section } from './outbox-option-checks';
import type { ResolvedEventPolicies } from './resolve-event-policies';
import type { ResolvedCleanerOptions } from './resolve-group-options';

/** `claimCheck` with its defaults applied and its values checked. */
export interface ResolvedClaimCheckOptions {
  readonly store: ClaimCheckStore;
  /** The module's threshold, for types whose policy gives none. */
  readonly thresholdBytes: number;
  /** The threshold of a type: payloads over it are sent by reference; null never. */
  readonly thresholdFor: (eventType: string) => number | null;
  /**
   * The instance's claim-check table, attached once its connection is known: the publisher
   * writes it, the cleaner sweeps it.
   */
  readonly ledger: ClaimCheckLedgerSlot;
}

/**
 * Checks `claimCheck`; null when it is left out (then no policy may name a threshold). Payloads
 * follow their messages' retention, so delivered rows must be kept for a while: a retention of 0
 * would delete a payload before a consumer could fetch it.
 */
export function resolveClaimCheckOptions(
  value: OutboxClaimCheckOptions | undefined,
  cleaner: ResolvedCleanerOptions,
  policies: ResolvedEventPolicies,
  external: boolean,
): ResolvedClaimCheckOptions | null {
  if (value === undefined) {
    for (const policy of policies.types.values()) {
      if (policy.claimCheckThresholdBytes !== undefined) {
        fail(
          `policies[${JSON.stringify(policy.name)}].claimCheckThresholdBytes`,
          'it is set, but the claimCheck option is not',
          'Give the module a claimCheck with its store (docs/claim-check.md), or leave the threshold out of the policy.',
        );
      }
    }
    return null;
  }
  const given = section(value, 'claimCheck');
  const store = given.store;
  if (
    store === null ||
    typeof store !== 'object' ||
    typeof (store as Partial<ClaimCheckStore>).locationFor !== 'function' ||
    typeof (store as Partial<ClaimCheckStore>).get !== 'function'
  ) {
    fail(
      'claimCheck.store',
      `${checks.show(store)} is not a claim-check store`,
      "Pass s3ClaimCheckStore({ client, bucket }) of 'nestjs-outbox/s3', or tableClaimCheckStore() of 'nestjs-outbox/claim-check'.",
    );
  }
  if (external) {
    fail(
      'claimCheck',
      "it cannot be combined with delivery 'external': the module's publisher sends the reference, and an external engine publishes the rows as they are",
      "Leave claimCheck out with delivery 'external', or write delivery: 'poll'.",
    );
  }
  const thresholdBytes = checks.integer(
    given.thresholdBytes,
    OUTBOX_DEFAULTS.claimCheck.thresholdBytes.value,
    'claimCheck.thresholdBytes',
    0,
    64 * 1024 * 1024,
    ' bytes',
  );
  const retained = (ms: number, option: string): void => {
    if (ms > 0) return;
    fail(
      option,
      'it is 0, which deletes delivered messages when they are settled, and their claim-checked payloads with them before a consumer could fetch them',
      'Keep delivered messages as long as consumers may fetch their payloads (e.g. a day), or leave claimCheck out.',
    );
  };
  retained(cleaner.deliveredRetentionMs, 'cleaner.deliveredRetentionMs');
  const own = new Map<string, number | null>();
  for (const policy of policies.types.values()) {
    const threshold =
      policy.claimCheckThresholdBytes === undefined
        ? thresholdBytes
        : policy.claimCheckThresholdBytes;
    if (threshold !== null) {
      retained(
        policy.deliveredRetentionMs,
        `policies[${JSON.stringify(policy.name)}].deliveredRetentionMs`,
      );
    }
    if (threshold !== thresholdBytes) own.set(policy.name, threshold);
  }
  return {
    store: store,
    thresholdBytes,
    thresholdFor: (eventType) => {
      const threshold = own.get(eventType);
      return threshold === undefined && !own.has(eventType) ? thresholdBytes : (threshold ?? null);
    },
    ledger: new ClaimCheckLedgerSlot(),
  };
}
