import type { CanActivate, Type } from '@nestjs/common';
import type { IncomingHttpHeaders } from 'node:http';
import type { DataSource } from 'typeorm';
import { OptionChecks } from '../../options/option-checks';
import { DEFAULT_OUTBOX_NAME } from '../../outbox.constants';

/**
 * The HTTP request as the console hands it to `authorize` and `actor`: the adapter's own request
 * object (Express or Fastify), of which these fields are common to both.
 */
export interface OutboxConsoleRequest {
  readonly headers: IncomingHttpHeaders;
  readonly method?: string;
  readonly url?: string;
  readonly ip?: string;
  /** Whatever an authentication guard or middleware of the app put there. */
  readonly user?: unknown;
}

/** One action the console carried out, as its audit log keeps it. */
export interface OutboxConsoleAuditEntry {
  readonly at: Date;
  /** Who, as `actor` named them. */
  readonly actor: string;
  readonly action: 'retry' | 'purge' | 'redrive';
  /** By the ids ticked in a list, or by a filter. */
  readonly scope: 'selection' | 'filter';
  /** The filter (for `filter`) or the ids (for `selection`), as text. */
  readonly target: string;
  /** Dead letters the confirmation page showed. */
  readonly confirmed: number;
  /** Messages requeued or deleted. */
  readonly affected: number;
}

/** Options of `OutboxConsoleModule` that may come from a factory. */
export interface OutboxConsoleOptions {
  /**
   * A Nest guard class that decides who may open the console (resolved from the app, or built
   * with its dependencies). This or `authorize` is required, unless `unsafeAllowAnonymous`.
   */
  readonly guard?: Type<CanActivate>;
  /** A callback given the request that decides who may open the console. */
  readonly authorize?: (request: OutboxConsoleRequest) => boolean | Promise<boolean>;
  /**
   * Serve the console to anyone who reaches the path: for a developer's machine only. A warning
   * is logged at every boot. @default false
   */
  readonly unsafeAllowAnonymous?: boolean;
  /** Show everything, change nothing: no retry or purge. @default false */
  readonly readOnly?: boolean;
  /** The name the audit log gives the person behind a request. @default the request's `user` (its `username`, `name`, `email` or `id`), else `anonymous@<ip>` */
  readonly actor?: (request: OutboxConsoleRequest) => string | undefined;
  /** Where a refused visitor is sent to sign in (a link on the 401 page). @default none */
  readonly loginUrl?: string | null;
  /**
   * Keep the audit log in this table of this DataSource (created with
   * `ensureOutboxConsoleAuditTable`, `outboxAuditTableDdl` or `outbox schema migrate --audit`;
   * checked at startup), and
   * show it from there. @default none: the last 500 entries in memory
   */
  readonly auditTable?: {
    readonly dataSource: DataSource;
    /** @default 'outbox_console_audit' */
    readonly tableName?: string;
    readonly schema?: string;
  } | null;
  /** Also hand every audit entry to this (a log shipper). Awaited; a failure is logged. */
  readonly audit?: (entry: OutboxConsoleAuditEntry) => void | Promise<void>;
  /**
   * How often the console samples the backlog counts for its overview and the last hour's
   * chart (one grouped count of the undelivered rows each time); 0 samples only when a page
   * asks and the last sample is older than 10 s. @default 10000
   */
  readonly sampleIntervalMs?: number;
  /** Rows per page of the listings. @default 50 */
  readonly pageSize?: number;
  /**
   * Reload every page this often (seconds, 5 to 3600; 0 never), until the visitor types or ticks
   * something; the Refresh control of a page (`?refresh=`) overrides it. @default 0
   */
  readonly refreshSeconds?: number;
  /**
   * The secret the action tokens of the console's pages are signed with, 32 bytes or more (e.g.
   * `openssl rand -hex 32`), the same on every replica behind one load balancer: a token one
   * replica showed is then taken by the others. @default a key of this process (a note at boot
   * says replicas need one)
   */
  readonly csrfSecret?: string;
}

/** Options read when the module is defined, so never from a factory. */
export interface OutboxConsoleModuleExtras {
  /** Where the console is served, inside the app's HTTP server. @default '/outbox' */
  readonly path?: string;
  /** The `OutboxModule` instance to look at (its `name`). @default the default instance */
  readonly outbox?: string;
}

export interface ResolvedOutboxConsoleOptions {
  readonly guard: Type<CanActivate> | null;
  readonly authorize: ((request: OutboxConsoleRequest) => boolean | Promise<boolean>) | null;
  readonly unsafeAllowAnonymous: boolean;
  readonly readOnly: boolean;
  readonly actor: (request: OutboxConsoleRequest) => string;
  readonly loginUrl: string | null;
  readonly audit: ((entry: OutboxConsoleAuditEntry) => void | Promise<void>) | null;
  readonly auditTable: NonNullable<OutboxConsoleOptions['auditTable']> | null;
  readonly sampleIntervalMs: number;
  readonly pageSize: number;
  readonly refreshSeconds: number;
  readonly csrfSecret: string | null;
}

export const DEFAULT_CONSOLE_PATH = '/outbox';
/** The bounds of a page's reload interval: no faster than the backlog is worth reading. */
export const MIN_REFRESH_SECONDS = 5;
export const MAX_REFRESH_SECONDS = 3600;
/** The shortest `csrfSecret`: an HMAC-SHA256 key of less than its output would be the weak part. */
export const MIN_CSRF_SECRET_BYTES = 32;
const SUBJECT = 'OutboxConsoleModule';
const checks = new OptionChecks(SUBJECT);
const OPTION_KEYS = {
  '': {
    guard: true,
    authorize: true,
    unsafeAllowAnonymous: true,
    readOnly: true,
    actor: true,
    loginUrl: true,
    audit: true,
    auditTable: true,
    sampleIntervalMs: true,
    pageSize: true,
    refreshSeconds: true,
    csrfSecret: true,
  },
} as const satisfies { '': Record<keyof OutboxConsoleOptions, true> };
const PATH = /^(\/[A-Za-z0-9._~-]+)+$/;

function userName(user: unknown): string | undefined {
  if (typeof user === 'string' && user !== '') return user;
  if (user === null || typeof user !== 'object') return undefined;
  for (const field of ['username', 'name', 'email', 'id', 'sub']) {
    const value = (user as Record<string, unknown>)[field];
    if ((typeof value === 'string' && value !== '') || typeof value === 'number') {
      return String(value);
    }
  }
  return undefined;
}

const defaultActor = (request: OutboxConsoleRequest): string =>
  userName(request.user) ?? `anonymous@${request.ip ?? 'unknown'}`;

/**
 * The app's `actor`, falling back to the default where it names no one (it may answer
 * `undefined`): the audit log and the CSRF token's binding always have a name.
 */
function actorOf(
  actor: NonNullable<OutboxConsoleOptions['actor']> | null,
): ResolvedOutboxConsoleOptions['actor'] {
  if (actor === null) return defaultActor;
  return (request) => {
    const name = actor(request);
    return typeof name === 'string' && name !== '' ? name : defaultActor(request);
  };
}

function fn<T>(value: unknown, option: string, example: string): T | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'function') {
    checks.fail(option, `${checks.show(value)} is not a function`, `Pass e.g. ${example}.`);
  }
  return value as T;
}

/** The console's mount path, checked: `/outbox`, `/ops/outbox`; no trailing slash. */
export function resolveConsolePath(path: unknown = DEFAULT_CONSOLE_PATH): string {
  if (typeof path !== 'string' || !PATH.test(path)) {
    return checks.fail(
      'path',
      `${checks.show(path)} is not a path`,
      `Use a path from the root such as '/outbox' or '/admin/outbox' (letters, digits, . _ ~ -; no trailing slash), or leave it out for '${DEFAULT_CONSOLE_PATH}'.`,
    );
  }
  return path;
}

/** The outbox instance name, checked. */
export function resolveConsoleOutbox(name: unknown = DEFAULT_OUTBOX_NAME): string {
  if (typeof name !== 'string' || name === '') {
    return checks.fail(
      'outbox',
      `${checks.show(name)} is not a name`,
      "Give the OutboxModule's name option, or leave it out for the default instance.",
    );
  }
  return name;
}

function auditTableOf(
  value: OutboxConsoleOptions['auditTable'],
): ResolvedOutboxConsoleOptions['auditTable'] {
  if (value === undefined || value === null) return null;
  const dataSource: unknown = typeof value === 'object' ? value.dataSource : undefined;
  if (dataSource === null || typeof dataSource !== 'object' || !('query' in dataSource)) {
    return checks.fail(
      'auditTable',
      'it has no dataSource',
      'Pass { dataSource } (the DataSource of the outbox table), optionally with tableName and schema.',
    );
  }
  return value;
}

function csrfSecretOf(value: unknown): string | null {
  if (value === undefined || value === null) return null;
  // The value is never shown: a secret a few characters short of the bound is still most of one.
  const problem =
    typeof value !== 'string'
      ? `it is ${typeof value}, not a string`
      : Buffer.byteLength(value) < MIN_CSRF_SECRET_BYTES
        ? `it is ${Buffer.byteLength(value)} bytes long`
        : null;
  if (problem !== null) {
    checks.fail(
      'csrfSecret',
      problem,
      `Give a random string of ${MIN_CSRF_SECRET_BYTES} bytes or more, the same on every replica (e.g. from \`openssl rand -hex 32\`, kept with the app's other secrets), or leave it out for a key of this process.`,
    );
  }
  return value as string;
}

/**
 * Applies the defaults and refuses what would make the console unsafe or broken, with an
 * `OutboxOptionsError` that says how to fix it: above all a console with no access control.
 */
export function resolveOutboxConsoleOptions(
  options: OutboxConsoleOptions,
): ResolvedOutboxConsoleOptions {
  if (options === null || typeof options !== 'object') {
    checks.fail(
      'options',
      `${checks.show(options)} is not an object`,
      'Pass e.g. { guard: AdminGuard }.',
    );
  }
  checks.knownKeys(options, OPTION_KEYS);
  const guard = fn<Type<CanActivate>>(
    options.guard,
    'guard',
    'guard: AdminGuard (a class implementing CanActivate)',
  );
  const authorize = fn<ResolvedOutboxConsoleOptions['authorize']>(
    options.authorize,
    'authorize',
    'authorize: (request) => request.headers.authorization === `Bearer ${token}`',
  );
  const unsafeAllowAnonymous = checks.bool(
    options.unsafeAllowAnonymous,
    false,
    'unsafeAllowAnonymous',
  );
  if (guard !== null && authorize !== null) {
    checks.fail(
      'guard',
      'both guard and authorize are given',
      'Give one of them: the console would not know which one decides.',
    );
  }
  if (guard === null && authorize === null && !unsafeAllowAnonymous) {
    checks.fail(
      'guard',
      'the console needs an access check: it can retry and purge messages and shows their payloads',
      'Give guard: YourAdminGuard (a Nest guard class) or authorize: (request) => boolean; on a development machine only, unsafeAllowAnonymous: true serves it to anyone (see docs/console.md#access).',
    );
  }
  const loginUrl = options.loginUrl ?? null;
  if (
    loginUrl !== null &&
    (typeof loginUrl !== 'string' || !loginUrl.startsWith('/') || loginUrl.startsWith('//'))
  ) {
    checks.fail(
      'loginUrl',
      `${checks.show(loginUrl)} is not a path of this app`,
      "Use a path such as '/login', or leave it out.",
    );
  }
  return {
    guard,
    authorize,
    unsafeAllowAnonymous,
    readOnly: checks.bool(options.readOnly, false, 'readOnly'),
    actor: actorOf(
      fn<NonNullable<OutboxConsoleOptions['actor']>>(
        options.actor,
        'actor',
        '(request) => request.user.email',
      ),
    ),
    loginUrl,
    audit: fn<ResolvedOutboxConsoleOptions['audit']>(
      options.audit,
      'audit',
      '(entry) => auditRepository.insert(entry)',
    ),
    auditTable: auditTableOf(options.auditTable),
    sampleIntervalMs:
      options.sampleIntervalMs === 0
        ? 0
        : checks.integer(
            options.sampleIntervalMs,
            10_000,
            'sampleIntervalMs',
            1_000,
            3_600_000,
            ' ms (or 0)',
          ),
    pageSize: checks.integer(options.pageSize, 50, 'pageSize', 1, 500),
    refreshSeconds:
      options.refreshSeconds === 0
        ? 0
        : checks.integer(
            options.refreshSeconds,
            0,
            'refreshSeconds',
            MIN_REFRESH_SECONDS,
            MAX_REFRESH_SECONDS,
            ' s (or 0)',
          ),
    csrfSecret: csrfSecretOf(options.csrfSecret),
  };
}
