import { OutboxOptionsError } from '../../lib';
import { ConsoleCsrf } from '../../lib/operations/console/console-csrf';
import { escapeHtml, html } from '../../lib/operations/console/console-html';
import {
  ConsoleInputError,
  deadLetterFilter,
  describeFilter,
  messageFilter,
} from '../../lib/operations/console/console-input';
import {
  resolveConsolePath,
  resolveOutboxConsoleOptions,
} from '../../lib/operations/console/console.options';

// The console's checks that need no server: its options, its escaping, its reading of filters,
// and its CSRF tokens. What the pages do with them is in test/operations/outbox-console*.spec.ts.

describe('OutboxConsoleModule options', () => {
  const allow = () => true;

  it('refuses a console without an access check, and says how to fix it', () => {
    expect(() => resolveOutboxConsoleOptions({})).toThrow(OutboxOptionsError);
    expect(() => resolveOutboxConsoleOptions({})).toThrow(
      /Invalid OutboxConsoleModule option "guard".*guard: YourAdminGuard.*authorize.*unsafeAllowAnonymous: true/,
    );
    expect(resolveOutboxConsoleOptions({ unsafeAllowAnonymous: true }).unsafeAllowAnonymous).toBe(
      true,
    );
    expect(resolveOutboxConsoleOptions({ authorize: allow }).authorize).toBe(allow);
  });

  it('refuses both a guard and a callback, unknown keys and bad values', () => {
    class Guard {
      canActivate(): boolean {
        return true;
      }
    }
    expect(() => resolveOutboxConsoleOptions({ guard: Guard, authorize: allow })).toThrow(
      /Give one of them/,
    );
    expect(() =>
      resolveOutboxConsoleOptions({ authorize: allow, readonly: true } as never),
    ).toThrow(/readonly is not an option; did you mean readOnly\?/);
    expect(() => resolveOutboxConsoleOptions({ authorize: 'yes' } as never)).toThrow(
      /is not a function/,
    );
    expect(() => resolveOutboxConsoleOptions({ authorize: allow, sampleIntervalMs: 10 })).toThrow(
      /sampleIntervalMs/,
    );
    expect(() =>
      resolveOutboxConsoleOptions({ authorize: allow, loginUrl: 'https://evil.example' }),
    ).toThrow(/loginUrl/);
    expect(() =>
      resolveOutboxConsoleOptions({ authorize: allow, loginUrl: '//evil.example' }),
    ).toThrow(/loginUrl/);
  });

  it('takes a path from the root without a trailing slash', () => {
    expect(resolveConsolePath()).toBe('/outbox');
    expect(resolveConsolePath('/ops/outbox')).toBe('/ops/outbox');
    for (const bad of ['outbox', '/outbox/', '/', '/a b', '/x?y', 42]) {
      expect(() => resolveConsolePath(bad)).toThrow(OutboxOptionsError);
    }
  });

  it('names the actor from request.user, else anonymous with the address', () => {
    const { actor } = resolveOutboxConsoleOptions({ authorize: allow });
    expect(actor({ headers: {}, user: { email: 'ops@example.com' } })).toBe('ops@example.com');
    expect(actor({ headers: {}, user: 'alice' })).toBe('alice');
    expect(actor({ headers: {}, ip: '10.0.0.7' })).toBe('anonymous@10.0.0.7');
  });
});

describe('console markup', () => {
  it('escapes every interpolated value, in text and attributes', () => {
    const payload = `<script>alert("x")</script><img src=x onerror='y'>\``;
    expect(html`<pre title="${payload}">${payload}</pre>`.value).toBe(
      `<pre title="${escapeHtml(payload)}">&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img src=x onerror=&#39;y&#39;&gt;&#96;</pre>`,
    );
    expect(html`<p>${html`<b>${'<i>'}</b>`}${[1, '<', null, undefined, false]}</p>`.value).toBe(
      '<p><b>&lt;i&gt;</b>1&lt;</p>',
    );
  });
});

describe('console filters', () => {
  it('reads the given fields only, minutes as milliseconds', () => {
    expect(
      deadLetterFilter({ topic: ' orders ', key: '', error: 'timeout', olderThanMinutes: '1.5' }),
    ).toEqual({
      topic: 'orders',
      errorContains: 'timeout',
      olderThanMs: 90_000,
    });
    expect(messageFilter({})).toEqual({ status: 'dead' });
    expect(describeFilter({ topic: 'orders', olderThanMs: 60_000 })).toBe(
      'topic="orders" olderThanMinutes="1"',
    );
  });

  it('refuses what it cannot read, with the reason', () => {
    expect(() => deadLetterFilter({ olderThanMinutes: '-5' })).toThrow(ConsoleInputError);
    expect(() => deadLetterFilter({ olderThanMinutes: '1e3' })).toThrow(/0 or more/);
    expect(() => deadLetterFilter({ topic: ['a', 'b'] })).toThrow(/more than once/);
    expect(() => messageFilter({ status: 'gone' })).toThrow(/status must be one of/);
  });
});

describe('console CSRF', () => {
  const same = {
    headers: {
      host: 'ops.example:3000',
      origin: 'http://ops.example:3000',
      'sec-fetch-site': 'same-origin',
    },
  };

  it('accepts its own fresh token from the same origin only', () => {
    let now = 1_000_000;
    const csrf = new ConsoleCsrf({ now: () => now });
    const token = csrf.token('alice');
    expect(csrf.refusal(same, token, 'alice')).toBeNull();
    expect(csrf.refusal({ headers: { host: 'ops.example:3000' } }, token, 'alice')).toBeNull();
    expect(csrf.refusal(same, undefined, 'alice')).toMatch(/no console token/);
    expect(csrf.refusal(same, new ConsoleCsrf({ now: () => now }).token('alice'), 'alice')).toMatch(
      /not valid/,
    );
    expect(
      csrf.refusal(same, token.replace(/^\d+/, String(now + 10 * 3_600_000)), 'alice'),
    ).toMatch(/not valid/);
    expect(
      csrf.refusal(
        { headers: { ...same.headers, 'sec-fetch-site': 'cross-site' } },
        token,
        'alice',
      ),
    ).toMatch(/another site/);
    expect(
      csrf.refusal(
        { headers: { host: 'ops.example:3000', origin: 'https://evil.example' } },
        token,
        'alice',
      ),
    ).toMatch(/another origin/);
    now += 3_600_001;
    expect(csrf.refusal(same, token, 'alice')).toMatch(/expired/);
  });

  it('signs alike under one csrfSecret and console path, and apart under another of either', () => {
    const secret = 'a-secret-the-replicas-share-0123456789';
    const token = new ConsoleCsrf({ secret, scope: '/outbox' }).token('alice');
    const refusal = (options: ConstructorParameters<typeof ConsoleCsrf>[0]): string | null =>
      new ConsoleCsrf(options).refusal(same, token, 'alice');
    expect(refusal({ secret, scope: '/outbox' })).toBeNull();
    expect(refusal({ secret: `${secret}!`, scope: '/outbox' })).toMatch(/not valid/);
    expect(refusal({ secret, scope: '/audit-outbox' })).toMatch(/not valid/);
    expect(refusal({ scope: '/outbox' })).toMatch(/not valid/);
  });

  it('reads X-Forwarded-Host only where the adapter trusts the peer that sent it', () => {
    const csrf = new ConsoleCsrf();
    const token = csrf.token('alice');
    const proxied = {
      host: '10.0.0.5:3000',
      origin: 'https://ops.example',
      'x-forwarded-host': 'ops.example:443, 10.0.0.5',
    };
    const express = (trusted: boolean) => ({
      headers: proxied,
      socket: { remoteAddress: '10.0.0.9' },
      app: { get: (name: string) => (name === 'trust proxy fn' ? () => trusted : undefined) },
    });
    expect(csrf.refusal(express(false), token, 'alice')).toMatch(/another origin/);
    // Express takes the first entry, and :443 is https's own port.
    expect(csrf.refusal(express(true), token, 'alice')).toBeNull();
    // Fastify answers `host` itself, by its trustProxy (5) or `hostname` (4, with the port).
    const fastify = (fields: object) => ({ headers: proxied, raw: {}, ...fields });
    expect(csrf.refusal(fastify({ host: '10.0.0.5:3000' }), token, 'alice')).toMatch(/origin/);
    expect(csrf.refusal(fastify({ host: 'ops.example' }), token, 'alice')).toBeNull();
    expect(csrf.refusal(fastify({ hostname: 'ops.example' }), token, 'alice')).toBeNull();
    // Another adapter: the Host header alone.
    expect(csrf.refusal({ headers: proxied }, token, 'alice')).toMatch(/another origin/);
    expect(
      csrf.refusal({ headers: { ...proxied, host: 'ops.example' } }, token, 'alice'),
    ).toBeNull();
  });
});
