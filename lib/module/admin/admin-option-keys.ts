import { OutboxAdminInputError } from '../../errors/outbox-admin-input.error';
import type { KnownOptionKeys } from '../../internal/did-you-mean';
import { refuseUnknownKeys } from '../../internal/known-keys';
import { OutboxMessages } from '../../outbox.messages';
import type { OutboxAuditTableOptions } from '../../store/shared-sql/audit-table';
import type { OutboxPageRequest, OutboxStuckLeaseQuery } from './outbox-admin.interfaces';
import type { OutboxEraseOptions } from './outbox-erasure.interfaces';
import type { OutboxGapRepairOptions } from './gap-repair.interfaces';
import type {
  OutboxRedriveOptions,
  OutboxRedrivePreviewOptions,
} from './outbox-redrive.interfaces';

// The keys each admin method's options object accepts, declared with `satisfies` so that the
// build fails when an options interface gains a key these lists lack. (The filters have their
// own checks, which also refuse `undefined` values: see `checkFilter` and `redriveFilterOf`.)

const AUDIT_TABLE = {
  tableName: true,
  schema: true,
} satisfies Record<keyof OutboxAuditTableOptions, true>;

const PAGE = { after: true, limit: true } satisfies Record<keyof OutboxPageRequest, true>;

export const ADMIN_OPTION_KEYS = {
  redrive: {
    '': {
      actor: true,
      reason: true,
      destination: true,
      ratePerSecond: true,
      expected: true,
      maxCount: true,
      auditTable: true,
    } satisfies Record<keyof OutboxRedriveOptions, true>,
    auditTable: AUDIT_TABLE,
  },
  previewRedrive: {
    '': { sampleSize: true, maxCount: true } satisfies Record<
      keyof OutboxRedrivePreviewOptions,
      true
    >,
  },
  redrives: { '': { limit: true, auditTable: true }, auditTable: AUDIT_TABLE },
  erase: {
    '': { actor: true, reason: true, auditTable: true } satisfies Record<
      keyof OutboxEraseOptions,
      true
    >,
    auditTable: AUDIT_TABLE,
  },
  gapRepairer: {
    '': {
      ratePerSecond: true,
      burst: true,
      resendAfterMs: true,
      maxSequences: true,
      auditTable: true,
    } satisfies Record<keyof OutboxGapRepairOptions, true>,
    auditTable: AUDIT_TABLE,
  },
  list: { '': PAGE },
  blockedKeys: { '': PAGE },
  stuckLeases: {
    '': { ...PAGE, leasedLongerThanMs: true } satisfies Record<keyof OutboxStuckLeaseQuery, true>,
  },
} as const satisfies Readonly<Record<string, KnownOptionKeys>>;

/**
 * Refuses, with `OutboxAdminInputError` and before any statement, a key that `method`'s options
 * do not have: a script written for another build (`redrive({ expectedCount })`) must not run
 * without the check it believes it asked for.
 */
export function refuseUnknownAdminOptions(
  method: keyof typeof ADMIN_OPTION_KEYS,
  options: unknown,
): void {
  refuseUnknownKeys(
    options,
    ADMIN_OPTION_KEYS[method],
    ({ path, suggestion, accepted }) =>
      new OutboxAdminInputError(
        OutboxMessages.unknownRuntimeOption(`OutboxAdmin.${method}()`, path, suggestion, accepted),
        path,
      ),
  );
}
