import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { OutboxConsoleRequest } from './console.options';

const TOKEN_LIFETIME_MS = 3_600_000;

/**
 * Guards the console's POSTs against cross-site requests twice over: a token that only a page of
 * the console carries (an HMAC of its expiry and of the principal it was shown to, under a key of
 * this process, so no session store), and the browser's own word on where the request comes from
 * (`Sec-Fetch-Site`, `Origin`).
 */
export class ConsoleCsrf {
  private readonly key = randomBytes(32);

  constructor(private readonly now: () => number = Date.now) {}

  /** A token for the pages shown to `principal` (the actor the request resolves to). */
  token(principal: string): string {
    const expires = String(this.now() + TOKEN_LIFETIME_MS);
    return `${expires}.${this.sign(expires, principal)}`;
  }

  /** The reason the request of `principal` is refused, or null when it may act. */
  refusal(request: OutboxConsoleRequest, token: unknown, principal: string): string | null {
    const site = header(request, 'sec-fetch-site');
    if (site !== undefined && site !== 'same-origin' && site !== 'none') {
      return `the request came from another site (Sec-Fetch-Site: ${site})`;
    }
    const origin = header(request, 'origin');
    // An opaque origin (a sandboxed frame, a data: URL, a redirect across sites) may be anyone's.
    // A browser that writes it for the console's own form under a no-referrer policy of the app
    // also sends Sec-Fetch-Site, which says so.
    if (origin === 'null' && site !== 'same-origin') {
      return 'the request came from an opaque origin (Origin: null)';
    }
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
    const expected = this.sign(expires, principal);
    const given = Buffer.from(mac);
    if (given.length !== expected.length || !timingSafeEqual(given, Buffer.from(expected))) {
      return 'the console token is not valid: reload the page and try again';
    }
    if (!(Number(expires) > this.now()))
      return 'the console token expired: reload the page and try again';
    return null;
  }

  private sign(expires: string, principal: string): string {
    // JSON keeps the two apart: no expiry and principal pair reads as another.
    return createHmac('sha256', this.key)
      .update(`outbox-console:${JSON.stringify([expires, principal])}`)
      .digest('base64url');
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
