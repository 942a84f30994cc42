import { createHash, timingSafeEqual } from 'node:crypto';
import type { OutboxConsoleRequest } from '../../lib/operations/console';

/** The cookie the login form sets: a hash of the token, so the token itself never sits in a cookie. */
export const CONSOLE_COOKIE = 'outbox_console';

export const cookieValueOf = (token: string): string =>
  createHash('sha256').update(`outbox-console:${token}`).digest('base64url');

const same = (a: string, b: string): boolean => {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
};

function cookie(request: OutboxConsoleRequest, name: string): string | undefined {
  const header = request.headers.cookie ?? '';
  for (const part of header.split(';')) {
    const [key, ...value] = part.trim().split('=');
    if (key === name) return value.join('=');
  }
  return undefined;
}

/**
 * The sample console's access check: `Authorization: Bearer <OUTBOX_CONSOLE_TOKEN>` for tools,
 * the cookie of the login form for a person in a browser.
 */
export function consoleTokenCheck(token: string): (request: OutboxConsoleRequest) => boolean {
  const expectedCookie = cookieValueOf(token);
  return (request) => {
    const authorization = request.headers.authorization ?? '';
    if (authorization.startsWith('Bearer ') && same(authorization.slice(7), token)) return true;
    const fromCookie = cookie(request, CONSOLE_COOKIE);
    return fromCookie !== undefined && same(fromCookie, expectedCookie);
  };
}
