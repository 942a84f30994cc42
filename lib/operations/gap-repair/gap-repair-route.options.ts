import type { CanActivate, Type } from '@nestjs/common';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import type { OutboxGapRepairOptions } from '../../module/admin/gap-repair.interfaces';
import { ADMIN_OPTION_KEYS } from '../../module/admin/admin-option-keys';
import { refuseUnknownCallOptions } from '../../internal/known-keys';

/** What `authorize` sees of a request. */
export interface GapRepairHttpRequest {
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  /** Whatever an authentication guard or middleware of the app put there. */
  readonly user?: unknown;
}

/** Options of `OutboxGapRepairModule.forRoot()`: the route, who may call it, how it answers. */
export interface OutboxGapRepairModuleOptions extends OutboxGapRepairOptions {
  /** The route consumers POST their requests to. @default '/outbox/gap-repair' */
  readonly path?: string;
  /** The name of the OutboxModule instance that answers. @default the default instance */
  readonly outbox?: string;
  /**
   * A Nest guard class that decides who may ask (resolved from the app, or built with its
   * dependencies). This or `authorize` is required, unless `unsafeAllowAnonymous`.
   */
  readonly guard?: Type<CanActivate>;
  /** A callback given the request that decides who may ask, e.g. a shared bearer token. */
  readonly authorize?: (request: GapRepairHttpRequest) => boolean | Promise<boolean>;
  /**
   * Answer anyone who reaches the route: for a private network or a developer's machine only.
   * @default false
   */
  readonly unsafeAllowAnonymous?: boolean;
}

export const DEFAULT_GAP_REPAIR_PATH = '/outbox/gap-repair';
const PATH = /^(\/[A-Za-z0-9._~-]+)+$/;

/** The route's keys and the answer's (OutboxAdmin.gapRepairer()'s), with the audit table's. */
const MODULE_KEYS = {
  '': {
    ...ADMIN_OPTION_KEYS.gapRepairer[''],
    path: true,
    outbox: true,
    guard: true,
    authorize: true,
    unsafeAllowAnonymous: true,
  } satisfies Record<keyof OutboxGapRepairModuleOptions, true>,
  auditTable: ADMIN_OPTION_KEYS.gapRepairer.auditTable,
};

const fail = (field: string, problem: string, fix: string): never => {
  throw new OutboxOptionsError(
    `Invalid OutboxGapRepairModule option ${field}: ${problem}. ${fix}`,
    field,
  );
};

/** The module's own options, checked at bootstrap (the answer's options are the repairer's). */
export function resolveGapRepairRoute(options: OutboxGapRepairModuleOptions): {
  path: string;
  outbox: string | undefined;
  guard: Type<CanActivate> | null;
  authorize: OutboxGapRepairModuleOptions['authorize'] | null;
} {
  refuseUnknownCallOptions('OutboxGapRepairModule.forRoot()', options, MODULE_KEYS);
  const path = options.path ?? DEFAULT_GAP_REPAIR_PATH;
  if (typeof path !== 'string' || !PATH.test(path)) {
    fail(
      'path',
      `${JSON.stringify(path)} is not a path`,
      `Use a path from the root such as '/internal/gap-repair' (no trailing slash), or leave it out for '${DEFAULT_GAP_REPAIR_PATH}'.`,
    );
  }
  if (
    options.outbox !== undefined &&
    (typeof options.outbox !== 'string' || options.outbox === '')
  ) {
    fail('outbox', 'is not a name', "Give the OutboxModule's name option, or leave it out.");
  }
  const guard = options.guard ?? null;
  const authorize = options.authorize ?? null;
  if (guard !== null && typeof guard !== 'function') {
    fail('guard', 'is not a class', 'Pass a Nest guard class, e.g. { guard: ServiceTokenGuard }.');
  }
  if (authorize !== null && typeof authorize !== 'function') {
    fail('authorize', 'is not a function', 'Pass (request) => boolean.');
  }
  if (guard !== null && authorize !== null) {
    fail('guard', 'both guard and authorize are given', 'Give one of them.');
  }
  if (guard === null && authorize === null && options.unsafeAllowAnonymous !== true) {
    fail(
      'guard',
      'the route needs an access check: it makes the outbox send messages again',
      'Give guard: YourServiceGuard or authorize: (request) => boolean (e.g. a bearer token the consumers send); on a private network only, unsafeAllowAnonymous: true (see docs/gap-repair.md#securing-the-route).',
    );
  }
  return { path, outbox: options.outbox, guard, authorize };
}
