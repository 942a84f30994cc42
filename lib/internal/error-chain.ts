/**
 * What a link of an error chain may say: its SQLSTATE or code, its server errno, its text, its
 * class's name.
 */
export interface ErrorLink {
  readonly name?: unknown;
  readonly code?: unknown;
  readonly errno?: unknown;
  readonly message?: unknown;
}

/** Enough for an error wrapped by an ORM and by the store; a cycle cannot loop. */
const MAX_LINKS = 5;

/**
 * Whether `test` holds for `error` or for one it wraps, as a driver's error reaches the outbox:
 * as the driver answers it, or wrapped by an ORM (TypeORM's `driverError`) or by an Error's
 * `cause`.
 */
export function someInChain(error: unknown, test: (link: ErrorLink) => boolean): boolean {
  let current: unknown = error;
  for (let i = 0; i < MAX_LINKS && typeof current === 'object' && current !== null; i++) {
    const link = current as ErrorLink & { driverError?: unknown; cause?: unknown };
    if (test(link)) return true;
    current = link.driverError ?? link.cause;
  }
  return false;
}
