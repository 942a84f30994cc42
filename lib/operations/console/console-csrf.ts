import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { OutboxConsoleRequest } from './console.options';

const TOKEN_LIFETIME_MS = 3_600_000;

/**
 * Guards the console's POSTs against cross-site requests twice over: a token that only a page of
 * the console carries (an HMAC of its expiry under a key of this process, so no session store),
 * and the browser's own word on where the request comes from (`Sec-Fetch-Site`, `Origin`).
 */
export class ConsoleCsrf {
  private readonly key = randomBytes(32);

  constructor(private readonly now: () => number = Date.now) {}

  token(): string {
    const expires = String(this.now() + TOKEN_LIFETIME_MS);
    return `${expires}.${this.sign(expires)}`;
  }

  /** The reason the request is refused, or null when it may act. */
  refusal(request: OutboxConsoleRequest, token: unknown): string | null {
    const site = header(request, 'sec-fetch-site');
    if (site !== undefined && site !== 'same-origin' && site !== 'none') {
      return `the request came from another site (Sec-Fetch-Site: ${site})`;
    }
    const origin = header(request, 'origin');
    const host = header(request, 'host');
    if (
      origin !== undefined &&
      origin !== 'null' &&
      host !== undefined &&
      hostOf(origin) !== host
    ) {
      return 'the request came from another origin';
    }
    if (typeof token !== 'string')
      return 'the form has no console token: reload the page and try again';
    const [expires = '', mac = ''] = token.split('.');
    const expected = this.sign(expires);
    const given = Buffer.from(mac);
    if (given.length !== expected.length || !timingSafeEqual(given, Buffer.from(expected))) {
      return 'the console token is not valid: reload the page and try again';
    }
    if (!(Number(expires) > this.now()))
      return 'the console token expired: reload the page and try again';
    return null;
  }

  private sign(expires: string): string {
    return createHmac('sha256', this.key).update(`outbox-console:${expires}`).digest('base64url');
  }
}

function header(request: OutboxConsoleRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function hostOf(origin: string): string | undefined {
  try {
    return new URL(origin).host;
  } catch {
    return undefined;
  }
}
