import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { OutboxConsoleRequest } from './console.options';

const TOKEN_LIFETIME_MS = 3_600_000;

/** How a console signs its tokens. */
export interface ConsoleCsrfOptions {
  /**
   * The `csrfSecret` the replicas share, or null for a key of this process (a token is then
   * refused by every other process).
   */
  readonly secret?: string | null;
  /** The console's path: two consoles of one app (two outboxes) refuse each other's tokens. */
  readonly scope?: string;
  readonly now?: () => number;
}

/**
 * Guards the console's POSTs against cross-site requests twice over: a token that only a page of
 * the console carries (an HMAC of its expiry and of the principal it was shown to, under a key
 * derived from `csrfSecret` or made by this process, so no session store), and the browser's own
 * word on where the request comes from (`Sec-Fetch-Site`, `Origin`).
 */
export class ConsoleCsrf {
  private readonly key: Buffer;
  private readonly now: () => number;

  constructor(options: ConsoleCsrfOptions = {}) {
    const { secret = null, scope = '' } = options;
    this.now = options.now ?? Date.now;
    // Derived rather than the secret itself: a secret the app also uses elsewhere (a session
    // secret) then never signs anything a console would take, nor the reverse.
    this.key =
      secret === null
        ? randomBytes(32)
        : createHmac('sha256', secret).update(`nestjs-outbox console csrf:${scope}`).digest();
  }

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
    const host = hostOf(request);
    if (
      origin !== undefined &&
      origin !== 'null' &&
      host !== undefined &&
      !sameHost(origin, host)
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

/** What the console reads of an Express or a Fastify request, beyond `OutboxConsoleRequest`. */
interface AdapterRequest extends OutboxConsoleRequest {
  /** Express: the app, whose `trust proxy fn` setting says which peers are trusted proxies. */
  readonly app?: { get?: (setting: string) => unknown };
  readonly socket?: { remoteAddress?: string };
  /** Fastify: the Node request (its presence says the request is Fastify's). */
  readonly raw?: unknown;
  /** Fastify 5: the host, from X-Forwarded-Host when `trustProxy` trusts the peer. */
  readonly host?: unknown;
  /** Fastify 4: the same, with its port (Fastify 5 drops the port here). */
  readonly hostname?: unknown;
}

/**
 * The host the browser addressed, as the app's HTTP adapter sees it: the Host header, or the
 * proxy's `X-Forwarded-Host` where the app trusts the peer that sent it (Express `trust proxy`,
 * Fastify `trustProxy`), by the same rule that gives `request.ip`. Untrusted, that header is
 * anyone's to write and is ignored.
 */
function hostOf(request: AdapterRequest): string | undefined {
  const settings = request.app;
  if (typeof settings?.get === 'function') {
    // Express's own rule (req.host in Express 5), read here since Express 4's req.host drops
    // the port.
    const trust = settings.get('trust proxy fn');
    const forwarded = header(request, 'x-forwarded-host');
    if (
      forwarded !== undefined &&
      typeof trust === 'function' &&
      (trust as (address: string | undefined, hop: number) => unknown)(
        request.socket?.remoteAddress,
        0,
      ) === true
    ) {
      return forwarded.split(',')[0]?.trim();
    }
  } else if (request.raw !== undefined) {
    if (typeof request.host === 'string' && request.host !== '') return request.host;
    if (typeof request.hostname === 'string' && request.hostname !== '') return request.hostname;
  }
  return header(request, 'host');
}

function header(request: OutboxConsoleRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * Whether `origin` names `host`, read with the origin's scheme so that a default port written
 * out (a proxy's `X-Forwarded-Host: ops.example:443`) is the same host.
 */
function sameHost(origin: string, host: string): boolean {
  try {
    const url = new URL(origin);
    return url.host === new URL(`${url.protocol}//${host}`).host;
  } catch {
    return false;
  }
}
