import { Injectable, Logger, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { OutboxOptionsError, PermanentPublishError } from '../../lib';
import { ensureOutboxConsoleAuditTable } from '../../lib/operations/console';
import { escapeHtml } from '../../lib/operations/console/console-html';
import { OUTBOX_STORE } from '../../lib/outbox.constants';
import type { OutboxStore } from '../../lib/store/ports/outbox-store.port';
import { RecordingPublisher } from '../../lib/testing';
import { CONSOLE_TOKEN, openConsoleApp, type ConsoleApp } from '../support/console-app';
import {
  auth,
  countOf,
  get,
  post,
  rejectingPublisher,
  SCRIPT,
  squash,
  tokenOf,
} from '../support/console-http';
import { testDatabase, uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';
import { waitFor } from '../support/wait-for';

// The console over HTTP, on PostgreSQL, with dead letters made by the real dispatcher and a
// publisher that rejects them: what each page shows, what each action changes in the table,
// and what the console refuses (no access check, anonymous visitors, bad input, cross-site posts).

@Injectable()
class AdminHeaderGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    return (
      context.switchToHttp().getRequest<{ headers: Record<string, string> }>().headers[
        'x-admin'
      ] === 'yes'
    );
  }
}

/** An app's sign-in guard: the console's bearer token, and the user named by `x-user`. */
@Injectable()
class SignedInUserGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context
      .switchToHttp()
      .getRequest<{ headers: Record<string, string | undefined>; user?: unknown }>();
    if (request.headers.authorization !== auth.authorization) return false;
    request.user = { username: request.headers['x-user'] };
    return true;
  }
}

describeWith(['postgres'], 'OutboxConsoleModule over HTTP (PostgreSQL, Express)', () => {
  let c: ConsoleApp | undefined;
  afterEach(async () => {
    await c?.close();
    c = undefined;
  });

  it('says that delivery is external (Debezium) instead of reporting a dispatcher and a backlog', async () => {
    c = await openConsoleApp(new RecordingPublisher(), { delivery: 'external' });
    await c.enqueue([{ topic: 'orders', type: 'order.created', key: 'o-1', payload: { n: 1 } }]);
    const page = await waitFor('a sample with the message', async () => {
      const body = (await get(c?.url ?? '')).body;
      return body.includes('id="total-pending">1<') ? body : null;
    });
    expect(squash(page)).toContain('<strong>Delivery is external (Debezium).</strong>');
    expect(page).not.toContain('id="dispatcher"');
  });

  async function withDeadLetters(): Promise<{ orders: string[]; billing: string[] }> {
    c = await openConsoleApp(rejectingPublisher());
    const orders = await c.enqueue([
      { topic: 'orders', type: 'order.created', key: 'o-1', payload: { note: SCRIPT } },
      { topic: 'orders', type: 'order.created', key: 'o-2', payload: { n: 2 } },
      { topic: 'orders', type: 'order.paid', key: 'o-3', payload: { n: 3 } },
    ]);
    const billing = await c.enqueue([
      { topic: 'billing', type: 'invoice.sent', key: 'b-1', payload: { n: 4 } },
      { topic: 'billing', type: 'invoice.sent', key: 'b-2', payload: { n: 5 } },
    ]);
    await c.dispatcher.drain();
    expect((await c.admin.counts({ status: 'dead' })).dead).toBe(5);
    return { orders, billing };
  }

  it('refuses to start without an access check, saying how to fix it', async () => {
    const started = openConsoleApp(new RecordingPublisher(), { authorize: undefined });
    await expect(started).rejects.toThrow(OutboxOptionsError);
    await expect(started).rejects.toThrow(/guard.*authorize.*unsafeAllowAnonymous: true/s);
  });

  it('lets a Nest guard class of the app decide, with the request it is given', async () => {
    c = await openConsoleApp(new RecordingPublisher(), {
      authorize: undefined,
      guard: AdminHeaderGuard,
    });
    expect((await get(c.url, { 'x-admin': 'yes' })).status).toBe(200);
    expect((await get(c.url, { 'x-admin': 'no' })).status).toBe(401);
    expect((await get(c.url, auth)).status).toBe(401);
  });

  it('serves anyone with unsafeAllowAnonymous, warning at boot', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn');
    try {
      c = await openConsoleApp(new RecordingPublisher(), {
        authorize: undefined,
        unsafeAllowAnonymous: true,
      });
      expect(warn.mock.calls.map(([m]) => String(m)).join('\n')).toMatch(
        /open to anyone.*unsafeAllowAnonymous/,
      );
      expect((await get(c.url, {})).status).toBe(200);
    } finally {
      warn.mockRestore();
    }
  });

  it('refuses anonymous and wrongly authorised requests, pages and actions alike', async () => {
    const { orders } = await withDeadLetters();
    for (const headers of [{}, { authorization: 'Bearer wrong' }] as Record<string, string>[]) {
      const page = await get(`${c!.url}/messages?status=dead`, headers);
      expect(page.status).toBe(401);
      expect(page.body).not.toContain(orders[0]);
      const action = await post(
        `${c!.url}/actions/run`,
        [
          ['action', 'purge'],
          ['scope', 'filter'],
          ['topic', 'orders'],
          ['expected', '3'],
        ],
        headers,
      );
      expect(action.status).toBe(401);
    }
    expect((await c!.admin.counts({ status: 'dead' })).dead).toBe(5);
  });

  it('serves its stylesheet and script to a refused visitor, whose 401 page says how to sign in', async () => {
    c = await openConsoleApp(new RecordingPublisher());
    for (const [asset, type, text] of [
      ['console.css', 'text/css', ':root'],
      ['console.js', 'text/javascript', 'addEventListener'],
    ]) {
      const res = await fetch(`${c.url}/assets/${asset}`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toContain(type);
      expect(await res.text()).toContain(text);
    }
    const refused = await get(c.url, {});
    expect(refused.status).toBe(401);
    expect(refused.body).toContain('<link rel="stylesheet" href="/outbox/assets/console.css" />');
    // No loginUrl: no link to nowhere, but what refused the visitor and what to do.
    expect(refused.body).not.toContain('id="login"');
    expect(refused.body).toMatch(/access check for the console .* refused this request/);
    expect(refused.body).toMatch(/Sign in to the app .* reload this page.*<code>loginUrl<\/code>/);
    await c.close();

    c = await openConsoleApp(new RecordingPublisher(), { loginUrl: '/login?next=%2Foutbox' });
    const withLink = await get(`${c.url}/messages?status=dead`, {});
    expect(withLink.status).toBe(401);
    expect(withLink.body).toContain(
      '<a id="login" class="button" href="/login?next=%2Foutbox">Sign in</a>',
    );
  });

  it('lists dead letters with filters and pages, and shows one message with a <script> payload as text', async () => {
    const { orders, billing } = await withDeadLetters();
    const all = await get(`${c!.url}/messages?status=dead`);
    expect(all.status).toBe(200);
    for (const id of [...orders, ...billing]) expect(all.body).toContain(id);

    const paid = await get(`${c!.url}/messages?status=dead&topic=orders&type=order.paid`);
    expect(paid.body).toContain(orders[2]);
    expect(paid.body).not.toContain(orders[0]);
    const byKey = await get(`${c!.url}/messages?status=dead&key=b-2&error=SCHEMA+V2`);
    expect([billing[1], billing[0]].map((id) => byKey.body.includes(id!))).toEqual([true, false]);
    expect((await get(`${c!.url}/messages?status=dead&olderThanMinutes=60`)).body).toContain(
      'id="empty"',
    );

    const detail = await get(`${c!.url}/messages/${orders[0]}`);
    expect(detail.status).toBe(200);
    expect(detail.body).not.toContain('<script>document');
    expect(detail.body).toContain(
      '&lt;script&gt;document.title=\\&quot;pwned\\&quot;&lt;/script&gt;',
    );
    expect(detail.body).toContain('schema v2 unknown');
    expect(detail.body).toMatch(/Dead-lettered/);

    // The overview reads the sampler's last count (every second here), not the table.
    const overview = await waitFor('the sampled backlog', async () => {
      const page = await get(c!.url);
      return page.body.includes('id="total-dead">5<') ? page.body : null;
    });
    // autoStart: false in these tests: this instance's dispatcher is reported as not started.
    expect(overview).toMatch(/This instance's dispatcher: <strong>stopped<\/strong>/);
    expect(overview).toMatch(
      /<tr><td>billing<\/td><td>0<\/td><td>0<\/td><td>0<\/td>\s*<td><a href="\/outbox\/messages\?status=dead&amp;topic=billing">2<\/a><\/td><td>–<\/td><td>0<\/td><td>2<\/td><td>(<svg class="spark".*?<\/svg>)?<\/td><\/tr>/,
    );
  });

  it("shows a message's attempt history as an escaped table, and none for a message that never failed", async () => {
    const IMG = '<img src=x onerror=alert(1)>';
    c = await openConsoleApp(
      new RecordingPublisher().fail({ key: 'bad' }, 'permanent', {
        error: new PermanentPublishError(`${IMG} rejected`),
      }),
    );
    const [bad, good] = await c.enqueue([
      { topic: 'orders', type: 'order.created', key: 'bad', payload: {} },
      { topic: 'orders', type: 'order.created', key: 'good', payload: {} },
    ]);
    await c.dispatcher.drain();
    const detail = await get(`${c.url}/messages/${bad}`);
    expect(detail.status).toBe(200);
    expect(detail.body).toContain('<h2>Attempt history</h2><table id="attempts">');
    expect(detail.body).toMatch(
      /<tr><td>1<\/td><td><span class="badge">dead<\/span><\/td><td>[^<]+<\/td><td>[^<]+<\/td><td>PermanentPublishError<\/td><td class="error">PermanentPublishError: &lt;img src=x onerror=alert\(1\)&gt; rejected<\/td><\/tr>/,
    );
    expect(detail.body).not.toContain(IMG);
    const clean = await get(`${c.url}/messages/${good}`);
    expect(clean.body).toContain(
      '<h2>Attempt history</h2><p class="muted" id="attempts">No failed attempt.</p>',
    );
  });

  it('asks "Why is it not out?" of an undelivered message only, not of a delivered one', async () => {
    c = await openConsoleApp(new RecordingPublisher().fail({ key: 'bad' }, 'permanent'));
    const [bad, good] = await c.enqueue([
      { topic: 'orders', key: 'bad', payload: {} },
      { topic: 'orders', key: 'good', payload: {} },
    ]);
    await c.dispatcher.drain();
    expect((await c.admin.get(good!))?.status).toBe('delivered');
    const [later] = await c.enqueue([{ topic: 'orders', key: 'later', payload: {} }]);

    const delivered = (await get(`${c.url}/messages/${good}`)).body;
    expect(delivered).not.toContain('Why is it not out?');
    expect(delivered).toMatch(/<section id="why"><h2>Delivered<\/h2>/);
    const explained = (await get(`${c.url}/why?id=${good}`)).body;
    expect(explained).not.toContain('Why is it not out?');
    expect(explained).toMatch(/<section id="why"><h2>Delivered<\/h2>/);
    for (const id of [bad, later]) {
      const page = (await get(`${c.url}/messages/${id}`)).body;
      expect(page).toContain('<section id="why"><h2>Why is it not out?</h2>');
    }
  });

  it('reloads its pages at the interval of refreshSeconds or of the Refresh control, never a POST answer', async () => {
    await expect(openConsoleApp(new RecordingPublisher(), { refreshSeconds: 2 })).rejects.toThrow(
      /refreshSeconds.*2 is not a whole number from 5 to 3600 s \(or 0\)/s,
    );

    c = await openConsoleApp(new RecordingPublisher());
    const off = (await get(c.url)).body;
    expect(off).toContain('<body data-refresh="0">');
    expect(off).toMatch(/<option value="0" selected> ?off ?<\/option>/);
    await c.close();

    c = await openConsoleApp(rejectingPublisher(), { refreshSeconds: 15 });
    const byOption = (await get(c.url)).body;
    expect(byOption).toContain('<body data-refresh="15">');
    expect(byOption).toMatch(/<option value="15" selected> ?every 15 s ?<\/option>/);

    // The control sends the page's own filter again, with the visitor's interval.
    const listing = (await get(`${c.url}/messages?status=dead&topic=orders&refresh=5`)).body;
    expect(listing).toContain('<body data-refresh="5">');
    expect(listing).toContain(
      '<form method="get" action="/outbox/messages" id="refresh-form" class="refresh" hidden><input type="hidden" name="status" value="dead" /><input type="hidden" name="topic" value="orders" /><label>Refresh <select name="refresh" id="refresh">',
    );
    expect(listing).toMatch(/<option value="5" selected> ?every 5 s ?<\/option>/);
    const odd = (await get(`${c.url}/audit?refresh=90`)).body;
    expect(odd).toContain('<body data-refresh="90">');
    expect(odd).toMatch(/<option value="90" selected> ?every 90 s ?<\/option>/);
    expect((await get(`${c.url}/audit?refresh=0`)).body).toContain('<body data-refresh="0">');

    for (const bad of ['2', 'soon', '4000']) {
      const page = await get(`${c.url}/audit?refresh=${bad}`);
      expect(page.status).toBe(400);
      expect(page.body).toContain('refresh must be 0 (off) or 5 to 3600 seconds');
    }

    await c.enqueue([{ topic: 'orders', payload: {} }]);
    await c.dispatcher.drain();
    const listed = (await get(`${c.url}/messages?status=dead`)).body;
    const confirm = await post(`${c.url}/actions/confirm`, [
      ['csrf', tokenOf(listed)],
      ['action', 'purge'],
      ['scope', 'filter'],
      ['topic', 'orders'],
    ]);
    expect(confirm.status).toBe(200);
    expect(confirm.body).toContain('<body data-refresh="0">');
    expect(confirm.body).not.toContain('id="refresh-form"');
  });

  it('draws the last hour with a time axis, a count axis, dashed second lines and a legend', async () => {
    await withDeadLetters();
    // Two samples at least (one a second here) before there is a line to draw.
    const overview = await waitFor('two backlog samples', async () => {
      const page = await get(c!.url);
      return page.body.includes('<figure>') && page.body.includes('id="total-dead">5<')
        ? page.body
        : null;
    });
    const charts = [...overview.matchAll(/<figure>.*?<\/figure>/g)].map((m) => m[0]);
    expect(charts).toHaveLength(2);
    for (const [chart, unit, solid, dashed] of [
      [charts[0]!, 'messages', 'undelivered', 'dead'],
      [charts[1]!, 'per minute', 'delivered per minute', 'dead-lettered per minute'],
    ] as const) {
      // Count ticks from 0 to a round top at or above the peak (5 dead letters: 0 to 5 by 1).
      const counts = /<g class="axis y">(.*?)<\/g>/.exec(chart)?.[1] ?? '';
      expect([...counts.matchAll(/>(\d+)<\/text>/g)].map((m) => m[1])).toEqual([
        '0',
        '1',
        '2',
        '3',
        '4',
        '5',
      ]);
      expect(counts).toMatch(new RegExp(`> ?${unit} ?</text>$`));
      // Time ticks as UTC clock times (as many as the span has distinct ones, up to 5).
      const times = /<g class="axis x">(.*?)<\/g>/.exec(chart)?.[1] ?? '';
      const ticks = [...times.matchAll(/>(\d\d:\d\d(:\d\d)?)<\/text>/g)].map((m) => m[1]);
      expect(ticks.length).toBeGreaterThanOrEqual(2);
      expect(new Set(ticks).size).toBe(ticks.length);
      expect(times).toMatch(/> ?time \(UTC\) ?<\/text>$/);
      // The second series is dashed, drawn after (over) the first, and the legend says which is which.
      expect(chart).toMatch(/<polyline class="\w+" points=.*<polyline class="dead dashed" points=/);
      expect(chart).toMatch(
        new RegExp(
          `<figcaption class="legend"><span class="key \\w+"><svg class="swatch".*?<line class="\\w+".*?</svg> ${solid}</span> ?<span class="key dead dashed"><svg class="swatch".*?<line class="dead dashed".*?</svg> ${dashed}</span>`,
        ),
      );
    }
  });

  it('shows a binary message by size, content type and an escaped hex preview, never its raw bytes', async () => {
    c = await openConsoleApp(new RecordingPublisher());
    const bytes = Buffer.concat([
      Buffer.from('<script>alert(1)</script>', 'utf8'),
      Buffer.from([0x00, 0xff, 0x1b]),
    ]);
    const [id] = await c.enqueue([
      { topic: 'media', key: 'm-1', payload: bytes, contentType: 'application/avro' },
    ]);
    const detail = await get(`${c.url}/messages/${id}`);
    expect(detail.status).toBe(200);
    // (get() squashes whitespace: the page itself keeps the dump's lines and columns.)
    expect(detail.body).toMatch(
      new RegExp(`<p id="payload-kind"> ?binary, ${bytes.length} bytes, application/avro ?</p>`),
    );
    expect(detail.body).toContain(
      '<pre id="payload">00000000 3c 73 63 72 69 70 74 3e 61 6c 65 72 74 28 31 29 |&lt;script&gt;alert(1)|',
    );
    expect(detail.body).not.toContain('<script>alert');
    expect(detail.body).not.toContain('\u0000');
    expect(detail.body).not.toContain('\u001b');
  });

  it('pages the listing by keyset', async () => {
    c = await openConsoleApp(rejectingPublisher(), { pageSize: 2 });
    const ids = await c.enqueue([1, 2, 3, 4, 5].map((n) => ({ topic: 'orders', payload: { n } })));
    await c.dispatcher.drain();
    const seen: string[] = [];
    let url: string | null = `${c.url}/messages?status=dead`;
    while (url !== null) {
      const page = await get(url);
      seen.push(...[...page.body.matchAll(/data-message-id="([^"]+)"/g)].map((m) => m[1] ?? ''));
      const next = /id="next-page" href="([^"]+)"/.exec(page.body)?.[1];
      url = next === undefined ? null : new URL(next.replace(/&amp;/g, '&'), c.url).toString();
    }
    expect(seen).toEqual(ids);
  });

  it('answers bad filter values with 400 and the reason, and changes nothing', async () => {
    await withDeadLetters();
    const cases: [string, RegExp][] = [
      [
        '/messages?status=dead&olderThanMinutes=-5',
        /olderThanMinutes must be a number of minutes, 0 or more/,
      ],
      ['/messages?status=gone', /status must be one of dead, pending, waiting, delivered/],
      ['/messages/not-a-uuid', /id must be a message id \(a UUID\)/],
      ['/why?id=123', /id must be a message id/],
      ['/messages?status=dead&after=abc', /after must be a cursor/],
      ['/stuck-leases?leasedLongerThanMinutes=soon', /leasedLongerThanMinutes must be a number/],
    ];
    for (const [path, reason] of cases) {
      const page = await get(`${c!.url}${path}`);
      expect(`${path} ${page.status}`).toBe(`${path} 400`);
      expect(page.body).toMatch(reason);
    }
    const token = tokenOf((await get(`${c!.url}/messages?status=dead`)).body);
    const empty = await post(`${c!.url}/actions/confirm`, [
      ['csrf', token],
      ['action', 'purge'],
      ['scope', 'filter'],
    ]);
    expect(empty.status).toBe(400);
    expect(empty.body).toMatch(/at least one filter field/);
    const negative = await post(`${c!.url}/actions/run`, [
      ['csrf', token],
      ['action', 'purge'],
      ['scope', 'filter'],
      ['olderThanMinutes', '-1'],
      ['expected', '5'],
    ]);
    expect(negative.status).toBe(400);
    const badId = await post(`${c!.url}/actions/run`, [
      ['csrf', token],
      ['action', 'purge'],
      ['scope', 'selection'],
      ['id', 'x'],
      ['expected', '1'],
    ]);
    expect(badId.status).toBe(400);
    expect((await c!.admin.counts({ status: 'dead' })).dead).toBe(5);
  });

  it('refuses actions without the page token or from another site', async () => {
    await withDeadLetters();
    const token = tokenOf((await get(`${c!.url}/messages?status=dead`)).body);
    const form: [string, string][] = [
      ['action', 'purge'],
      ['scope', 'filter'],
      ['topic', 'orders'],
      ['expected', '3'],
    ];
    expect((await post(`${c!.url}/actions/run`, form)).status).toBe(403);
    expect((await post(`${c!.url}/actions/run`, [...form, ['csrf', 'forged.token']])).status).toBe(
      403,
    );
    expect(
      (
        await post(`${c!.url}/actions/run`, [...form, ['csrf', token]], {
          ...auth,
          'sec-fetch-site': 'cross-site',
        })
      ).status,
    ).toBe(403);
    expect(
      (
        await post(`${c!.url}/actions/run`, [...form, ['csrf', token]], {
          ...auth,
          origin: 'https://evil.example',
        })
      ).status,
    ).toBe(403);
    expect((await c!.admin.counts({ status: 'dead' })).dead).toBe(5);
  });

  it('refuses a POST with Origin: null unless the browser says it came from the console', async () => {
    await withDeadLetters();
    const token = tokenOf((await get(`${c!.url}/messages?status=dead`)).body);
    const form: [string, string][] = [
      ['csrf', token],
      ['action', 'purge'],
      ['scope', 'filter'],
      ['topic', 'orders'],
      ['expected', '3'],
    ];
    // A sandboxed iframe, a data: URL or a redirect across sites posts with an opaque origin.
    const opaque = await post(`${c!.url}/actions/run`, form, { ...auth, origin: 'null' });
    expect(opaque.status).toBe(403);
    expect(opaque.body).toMatch(/opaque origin/);
    expect((await c!.admin.counts({ status: 'dead' })).dead).toBe(5);
    // A browser that sends Origin: null under a no-referrer policy also says same-origin.
    const own = await post(`${c!.url}/actions/run`, form, {
      ...auth,
      origin: 'null',
      'sec-fetch-site': 'same-origin',
    });
    expect(own.status).toBe(200);
    expect((await c!.admin.counts({ status: 'dead' })).dead).toBe(2);
  });

  /** The form of a purge of the dead letters of topic `orders`, `expected` of them. */
  const purgeOrders = (token: string, expected: number): [string, string][] => [
    ['csrf', token],
    ['action', 'purge'],
    ['scope', 'filter'],
    ['topic', 'orders'],
    ['expected', String(expected)],
  ];
  const SECRET = 'the-replicas-shared-console-secret-0123456789';

  it('takes a page token shown by another replica with the same csrfSecret, and not under another secret', async () => {
    c = await openConsoleApp(rejectingPublisher(), { csrfSecret: SECRET });
    // The page a load balancer had one replica show; the form is posted to another.
    const shown = tokenOf((await get(`${c.url}/messages?status=dead`)).body);
    for (const [secret, status, dead] of [
      ['the-secret-of-another-deployment-0123456789', 403, 1],
      [SECRET, 200, 0],
    ] as const) {
      const replica = await openConsoleApp(rejectingPublisher(), { csrfSecret: secret });
      try {
        await replica.enqueue([{ topic: 'orders', payload: {} }]);
        await replica.dispatcher.drain();
        const run = await post(`${replica.url}/actions/run`, purgeOrders(shown, 1));
        expect(`${secret}: ${run.status}`).toBe(`${secret}: ${status}`);
        if (status === 403) expect(run.body).toMatch(/console token is not valid/);
        expect((await replica.admin.counts({ status: 'dead' })).dead).toBe(dead);
      } finally {
        await replica.close();
      }
    }
  });

  it('notes once at boot that replicas need a csrfSecret, and refuses a secret too short to be a key', async () => {
    const log = jest.spyOn(Logger.prototype, 'log');
    const notes = (): string[] =>
      log.mock.calls.map(([m]) => String(m)).filter((m) => m.includes('csrfSecret'));
    try {
      c = await openConsoleApp(new RecordingPublisher());
      expect(notes()).toHaveLength(1);
      expect(notes()[0]).toMatch(/replicas.*same csrfSecret/);
      await c.close();
      c = undefined;
      log.mockClear();
      c = await openConsoleApp(new RecordingPublisher(), { csrfSecret: SECRET });
      expect(notes()).toEqual([]);
    } finally {
      log.mockRestore();
    }
    for (const secret of ['short-secret', 42]) {
      const started = openConsoleApp(new RecordingPublisher(), {
        csrfSecret: secret as string,
      });
      await expect(started).rejects.toThrow(OutboxOptionsError);
      await expect(started).rejects.toThrow(/csrfSecret.*32 bytes or more.*openssl rand/s);
      await expect(started).rejects.not.toThrow(/short-secret/);
    }
  });

  it('checks Origin against X-Forwarded-Host only when the app trusts its proxy', async () => {
    // A proxy serves the console at https://ops.example and sends Host: 127.0.0.1:<port>.
    const viaProxy = {
      ...auth,
      origin: 'https://ops.example',
      'x-forwarded-host': 'ops.example',
    };
    c = await openConsoleApp(rejectingPublisher());
    await c.enqueue([{ topic: 'orders', payload: {} }]);
    await c.dispatcher.drain();
    let form = purgeOrders(tokenOf((await get(`${c.url}/messages?status=dead`)).body), 1);
    // Not trusted (Express's default): the header is anyone's, so it opens nothing.
    const untrusted = await post(`${c.url}/actions/run`, form, viaProxy);
    expect(untrusted.status).toBe(403);
    expect(untrusted.body).toMatch(/another origin/);
    expect((await c.admin.counts({ status: 'dead' })).dead).toBe(1);
    await c.close();
    c = undefined;

    c = await openConsoleApp(rejectingPublisher(), {}, { trustProxy: true });
    await c.enqueue([{ topic: 'orders', payload: {} }]);
    await c.dispatcher.drain();
    form = purgeOrders(tokenOf((await get(`${c.url}/messages?status=dead`)).body), 1);
    const elsewhere = await post(`${c.url}/actions/run`, form, {
      ...viaProxy,
      origin: 'https://evil.example',
    });
    expect(elsewhere.status).toBe(403);
    expect((await c.admin.counts({ status: 'dead' })).dead).toBe(1);
    const trusted = await post(`${c.url}/actions/run`, form, viaProxy);
    expect(trusted.status).toBe(200);
    expect((await c.admin.counts({ status: 'dead' })).dead).toBe(0);
  });

  it("names a visitor the app's actor does not name as the default would, in the audit log", async () => {
    c = await openConsoleApp(rejectingPublisher(), { actor: () => undefined });
    await c.enqueue([{ topic: 'orders', payload: {} }]);
    await c.dispatcher.drain();
    const token = tokenOf((await get(`${c.url}/messages?status=dead`)).body);
    const run = await post(`${c.url}/actions/run`, [
      ['csrf', token],
      ['action', 'purge'],
      ['scope', 'filter'],
      ['topic', 'orders'],
      ['expected', '1'],
    ]);
    expect(run.status).toBe(200);
    expect((await get(`${c.url}/audit`)).body).toMatch(/<td>anonymous@[^<]+<\/td><td>purge<\/td>/);
  });

  it("names each operator of docs/console.md's token recipe in the audit log, not anonymous@<ip>", async () => {
    // The recipe's useFactory body, with CONSOLE_TOKENS=alice:<token>,bob:<token>.
    const operators = new Map(
      'alice:alice-token-0123456789, bob:bob-token-0123456789'
        .split(',')
        .map((entry): [string, string] => {
          const [name = '', token = ''] = entry.trim().split(':');
          return [`Bearer ${token}`, name];
        }),
    );
    c = await openConsoleApp(rejectingPublisher(), {
      authorize: (request) => operators.has(request.headers.authorization ?? ''),
      actor: (request) => operators.get(request.headers.authorization ?? ''),
    });
    await c.enqueue([{ topic: 'orders', payload: {} }]);
    await c.dispatcher.drain();
    const alice = { authorization: 'Bearer alice-token-0123456789' };
    const bob = { authorization: 'Bearer bob-token-0123456789' };
    const form: [string, string][] = [
      ['csrf', tokenOf((await get(`${c.url}/messages?status=dead`, alice)).body)],
      ['action', 'purge'],
      ['scope', 'filter'],
      ['topic', 'orders'],
      ['expected', '1'],
    ];
    expect((await post(`${c.url}/actions/run`, form, bob)).status).toBe(403);
    expect((await post(`${c.url}/actions/run`, form, alice)).status).toBe(200);
    expect((await c.admin.counts({ status: 'dead' })).dead).toBe(0);
    const audit = (await get(`${c.url}/audit`, bob)).body;
    expect(audit).toMatch(/<td>alice<\/td><td>purge<\/td>/);
    expect(audit).not.toContain('anonymous@');
  });

  it('takes a page token only from the signed-in user it was made for', async () => {
    c = await openConsoleApp(rejectingPublisher(), {
      authorize: undefined,
      guard: SignedInUserGuard,
    });
    await c.enqueue([{ topic: 'orders', payload: {} }]);
    await c.dispatcher.drain();
    const as = (user: string): Record<string, string> => ({ ...auth, 'x-user': user });
    const alices = tokenOf((await get(`${c.url}/messages?status=dead`, as('alice'))).body);
    const form: [string, string][] = [
      ['csrf', alices],
      ['action', 'purge'],
      ['scope', 'filter'],
      ['topic', 'orders'],
      ['expected', '1'],
    ];
    const bob = await post(`${c.url}/actions/run`, form, as('bob'));
    expect(bob.status).toBe(403);
    expect(bob.body).toMatch(/console token is not valid/);
    expect((await c.admin.counts({ status: 'dead' })).dead).toBe(1);
    const alice = await post(`${c.url}/actions/run`, form, as('alice'));
    expect(alice.status).toBe(200);
    expect((await c.admin.counts({ status: 'dead' })).dead).toBe(0);
    expect((await get(`${c.url}/audit`, as('alice'))).body).toMatch(
      /<td>alice<\/td><td>purge<\/td>/,
    );
  });

  it('purges by filter after a confirmation that shows the exact count, and writes the audit log', async () => {
    const { orders, billing } = await withDeadLetters();
    const token = tokenOf((await get(`${c!.url}/messages?status=dead&topic=orders`)).body);
    const filter: [string, string][] = [
      ['topic', 'orders'],
      ['type', 'order.created'],
    ];
    const confirm = await post(`${c!.url}/actions/confirm`, [
      ['csrf', token],
      ['action', 'purge'],
      ['scope', 'filter'],
      ...filter,
    ]);
    expect(confirm.status).toBe(200);
    expect(countOf(confirm.body, 'matched')).toBe(2);
    // Nothing happens before the confirmation is posted.
    expect((await c!.admin.counts({ status: 'dead' })).dead).toBe(5);

    // A stale count is not acted on.
    const stale = await post(`${c!.url}/actions/run`, [
      ['csrf', token],
      ['action', 'purge'],
      ['scope', 'filter'],
      ['expected', '3'],
      ...filter,
    ]);
    expect(stale.status).toBe(409);
    expect((await c!.admin.counts({ status: 'dead' })).dead).toBe(5);

    const run = await post(`${c!.url}/actions/run`, [
      ['csrf', tokenOf(confirm.body)],
      ['action', 'purge'],
      ['scope', 'filter'],
      ['expected', '2'],
      ...filter,
    ]);
    expect(run.status).toBe(200);
    expect(countOf(run.body, 'result')).toBe(2);
    const left = (await c!.admin.list({ status: 'dead' })).items.map((m) => m.messageId);
    expect(left).toEqual([orders[2], ...billing]);

    const audit = await get(`${c!.url}/audit`);
    expect(audit.body).toMatch(
      /<td>anonymous@[^<]*<\/td><td>purge<\/td><td>filter: topic=&quot;orders&quot; type=&quot;order.created&quot;<\/td><td>2<\/td><td>2<\/td>/,
    );
  });

  it('keeps the audit log in its table when given one, and refuses to start without the table', async () => {
    const auditTableName = uniqueTable('console_audit');
    await expect(openConsoleApp(new RecordingPublisher(), { auditTableName })).rejects.toThrow(
      /auditTable.*ensureOutboxConsoleAuditTable\(dataSource\), in a migration with the statements of outboxAuditTableDdl\(dialect\) or with the command "outbox schema migrate --audit"/,
    );
    const postgres = testDatabase('postgres');
    const scratch = uniqueTable('outbox_console');
    const setup = await postgres.open(scratch);
    await ensureOutboxConsoleAuditTable(setup, { tableName: auditTableName });
    await postgres.close(setup, scratch);
    c = await openConsoleApp(rejectingPublisher(), {
      auditTableName,
      actor: () => 'ops@example.com',
    });
    const ds = c.dataSource;
    try {
      await c.enqueue([
        { topic: 'orders', payload: {} },
        { topic: 'billing', payload: {} },
      ]);
      await c.dispatcher.drain();
      const token = tokenOf((await get(`${c.url}/messages?status=dead`)).body);
      const form: [string, string][] = [
        ['csrf', token],
        ['action', 'purge'],
        ['scope', 'filter'],
        ['topic', 'billing'],
      ];
      expect(
        countOf((await post(`${c.url}/actions/run`, [...form, ['expected', '1']])).body, 'result'),
      ).toBe(1);
      const rows = await ds.query<
        { actor: string; action: string; target: string; confirmed: number; affected: number }[]
      >(`SELECT actor, action, scope, target, confirmed, affected FROM "${auditTableName}"`);
      expect(rows).toEqual([
        {
          actor: 'ops@example.com',
          action: 'purge',
          scope: 'filter',
          target: 'topic="billing"',
          confirmed: 1,
          affected: 1,
        },
      ]);
      expect((await get(`${c.url}/audit`)).body).toMatch(
        /from its audit table.*<td>ops@example.com<\/td><td>purge<\/td>/,
      );
    } finally {
      await ds.query(`DROP TABLE IF EXISTS "${auditTableName}"`);
    }
  });

  it.each(['purge', 'retry'] as const)(
    'audits each part of a %s by filter as it commits, when a later part fails',
    async (action) => {
      const auditTableName = uniqueTable('console_audit');
      const postgres = testDatabase('postgres');
      const scratch = uniqueTable('outbox_console');
      const setup = await postgres.open(scratch);
      await ensureOutboxConsoleAuditTable(setup, { tableName: auditTableName });
      await postgres.close(setup, scratch);
      c = await openConsoleApp(rejectingPublisher(), { auditTableName, actor: () => 'ops' });
      const ds = c.dataSource;
      const refuse = `${c.table}_refuse`;
      try {
        // One part more than a transaction takes (1 000 ids): the last one is in the second.
        const ids = await c.enqueue(
          Array.from({ length: 1_001 }, (_, n) => ({ topic: 'bulk', payload: { n } })),
        );
        await c.dispatcher.drain();
        expect((await c.admin.counts({ status: 'dead' })).dead).toBe(1_001);
        // The database refuses to change the last one, so the second part fails and rolls back.
        await ds.query(
          `CREATE FUNCTION "${refuse}"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by a trigger'; END $$`,
        );
        await ds.query(
          `CREATE TRIGGER "${refuse}" BEFORE UPDATE OR DELETE ON "${c.table}" FOR EACH ROW WHEN (OLD.message_id = '${ids[1_000]}') EXECUTE FUNCTION "${refuse}"()`,
        );
        const token = tokenOf((await get(`${c.url}/messages?status=dead`)).body);
        const run = await post(`${c.url}/actions/run`, [
          ['csrf', token],
          ['action', action],
          ['scope', 'filter'],
          ['topic', 'bulk'],
          ['expected', '1001'],
        ]);
        expect(run.status).toBe(500);
        expect((await c.admin.counts({ status: 'dead' })).dead).toBe(1);
        const rows = await ds.query<
          { actor: string; action: string; target: string; confirmed: number; affected: number }[]
        >(
          `SELECT actor, action, scope, target, confirmed, affected FROM "${auditTableName}" ORDER BY id`,
        );
        expect(rows).toEqual([
          {
            actor: 'ops',
            action,
            scope: 'filter',
            target: 'topic="bulk", part 1 of 2',
            confirmed: 1_001,
            affected: 1_000,
          },
        ]);
        // The page says what was done, and that the rest was not.
        expect(run.body).toMatch(/1000 of the 1001 dead letters/);
      } finally {
        await ds.query(`DROP TABLE IF EXISTS "${auditTableName}"`);
        await ds.query(`DROP TRIGGER IF EXISTS "${refuse}" ON "${c.table}"`);
        await ds.query(`DROP FUNCTION IF EXISTS "${refuse}"()`);
      }
    },
  );

  it('retries a selection: the message leaves the dead letters and is published again', async () => {
    const publisher = rejectingPublisher();
    c = await openConsoleApp(publisher);
    const [first, second] = await c.enqueue([
      { topic: 'orders', key: 'r-1', payload: { n: 1 } },
      { topic: 'orders', key: 'r-2', payload: { n: 2 } },
    ]);
    await c.dispatcher.drain();
    publisher.heal();
    const token = tokenOf((await get(`${c.url}/messages?status=dead`)).body);
    const confirm = await post(`${c.url}/actions/confirm`, [
      ['csrf', token],
      ['action', 'retry'],
      ['scope', 'selection'],
      ['id', first!],
    ]);
    expect(countOf(confirm.body, 'matched')).toBe(1);
    const run = await post(`${c.url}/actions/run`, [
      ['csrf', token],
      ['action', 'retry'],
      ['scope', 'selection'],
      ['id', first!],
      ['expected', '1'],
    ]);
    expect(countOf(run.body, 'result')).toBe(1);
    expect((await c.admin.get(first!))?.status).toBe('pending');
    await c.dispatcher.drain();
    expect((await c.admin.get(first!))?.status).toBe('delivered');
    expect(publisher.attemptsOf(first!)).toBe(2);
    expect((await c.admin.get(second!))?.status).toBe('dead');
  });

  it('counts a retried dead letter moved behind its key as retried, on the page and in the audit', async () => {
    c = await openConsoleApp(rejectingPublisher(), { ordering: { onDeadLetter: 'skip' } });
    const [dead] = await c.enqueue([{ topic: 'orders', key: 'k-1', payload: { n: 1 } }]);
    await c.dispatcher.drain();
    // A later message of the key queued past the dead one: the retry puts it behind that one.
    const [later] = await c.enqueue([{ topic: 'orders', key: 'k-1', payload: { n: 2 } }]);
    expect((await c.admin.get(later!))?.status).toBe('pending');
    const token = tokenOf((await get(`${c.url}/messages?status=dead`)).body);
    const run = await post(`${c.url}/actions/run`, [
      ['csrf', token],
      ['action', 'retry'],
      ['scope', 'selection'],
      ['id', dead!],
      ['expected', '1'],
    ]);
    expect(countOf(run.body, 'result')).toBe(1);
    const [first, second] = (await c.admin.list({ key: 'k-1', status: 'pending' })).items;
    expect([first?.messageId, second?.messageId]).toEqual([later, dead]);
    expect((await get(`${c.url}/audit`)).body).toMatch(
      /<td>retry<\/td><td>selection: ids [^<]+<\/td><td>1<\/td><td>1<\/td>/,
    );
  });

  it('shows blocked keys, stuck leases and why a message is not out', async () => {
    c = await openConsoleApp(rejectingPublisher());
    // A dead head (ordering.onDeadLetter 'block' by default) holds two later messages of its key.
    const [head] = await c.enqueue([{ topic: 'orders', key: 'k-blocked', payload: { n: 1 } }]);
    await c.dispatcher.drain();
    const [, parked] = await c.enqueue([
      { topic: 'orders', key: 'k-blocked', payload: { n: 2 } },
      { topic: 'orders', key: 'k-blocked', payload: { n: 3 } },
    ]);
    await c.dispatcher.drain();
    const blocked = (await get(`${c.url}/blocked-keys`)).body;
    expect(blocked).toMatch(
      new RegExp(
        `<tr><td>k-blocked</td><td><a href="/outbox/messages/${head}">${head}</a></td><td>dead</td><td>1</td>.*?<td>2</td>`,
      ),
    );

    // A lease whose dispatcher died: claimed by an owner that never settles, with a 1 ms lease.
    const [lost] = await c.enqueue([{ topic: 'leases', payload: {} }]);
    const claimed = await c.app
      .get<OutboxStore>(OUTBOX_STORE)
      .claim({ limit: 10, owner: 'crashed-instance', leaseMs: 1 });
    expect(claimed.records.map((r) => r.messageId)).toEqual([lost]);
    await waitFor(
      'the lease to expire',
      async () => (await c!.admin.stuckLeases()).items.length === 1,
    );
    const leases = (await get(`${c.url}/stuck-leases`)).body;
    expect(leases).toMatch(
      new RegExp(`${lost}</a></td><td>leases</td><td>crashed-instance</td>.*?<td>yes</td>`),
    );

    const why = (await get(`${c.url}/why?id=${parked}`)).body;
    expect(why).toContain(`Parked behind ${head} (dead), the head of key &quot;k-blocked&quot;`);
    const unknown = (await get(`${c.url}/why?id=00000000-0000-4000-8000-000000000000`)).body;
    expect(unknown).toContain('No message with this id');
    expect((await get(`${c.url}/messages/00000000-0000-4000-8000-000000000000`)).status).toBe(404);
  });

  // Issue 75, item 18: the dispatchers' delivery partitions have a page of their own.
  it("shows the delivery partitions: not in use on a 'leases' app; under 'partitions' each dispatcher with its heartbeat, state and share, and the moves", async () => {
    c = await openConsoleApp(new RecordingPublisher(), { dispatcher: { claims: 'leases' } });
    const unused = (await get(`${c.url}/delivery-partitions`)).body;
    expect(unused).toContain('<a href="/outbox/delivery-partitions">Delivery partitions</a>');
    expect(unused).toMatch(
      /<p id="not-in-use" data-reason="no-dispatcher">Delivery partitions are not in use on &quot;[^&]+&quot;: no dispatcher delivers it by partitions \(this app&#39;s dispatcher.claims is &#39;leases&#39;/,
    );
    expect(unused).not.toContain('id="partition-dispatchers"');
    await c.close();

    // An instanceId is the app's text: shown, never run.
    c = await openConsoleApp(new RecordingPublisher(), {
      autoStart: true,
      instanceId: SCRIPT,
      dispatcher: { claims: 'partitions', partitionTimeoutMs: 3_000 },
    });
    const app = c;
    const page = await waitFor('the dispatcher holding every partition', async () => {
      const body = squash((await get(`${app.url}/delivery-partitions`)).body);
      return body.includes('id="partitions-free">0<') ? body : null;
    });
    const view = await c.admin.deliveryPartitions();
    const [only] = view.inUse ? view.dispatchers : [];
    expect(only?.instanceId).toBe(SCRIPT);
    expect(page).toContain('<dd id="partitions-total">256</dd>');
    expect(page).toContain('<dd id="partitions-holders">1</dd>');
    expect(page).toContain('<dd id="partitions-moves">256</dd>');
    expect(page).not.toContain(SCRIPT);
    expect(page).toContain(`<td>${escapeHtml(SCRIPT)}</td><td>delivering</td>`);
    expect(page).toMatch(
      /<tr data-dispatcher="[^"]+" data-state="delivering"><td>[^<]+<\/td><td>[^<]+<\/td><td>delivering<\/td><td>[0-9]+ ms ago<\/td><td>3 s<\/td><td>256<\/td><td>100 %<\/td><td>0-255<\/td>/,
    );
    expect(page).toMatch(/<table id="partition-moves">.*?<td>256<\/td><td>0-255<\/td>/);
    expect(page.match(/<tr><td>[0-9]+<\/td><td>[^<]+<\/td><td>1<\/td>/g)).toHaveLength(256);
  });

  it('in read-only mode shows no action and refuses posted ones', async () => {
    c = await openConsoleApp(rejectingPublisher(), { readOnly: true });
    await c.enqueue([{ topic: 'orders', payload: {} }]);
    await c.dispatcher.drain();
    const page = await get(`${c.url}/messages?status=dead`);
    expect(page.body).toContain('read-only');
    expect(page.body).not.toContain('actions/confirm');
    const run = await post(`${c.url}/actions/run`, [
      ['csrf', 'x'],
      ['action', 'purge'],
      ['scope', 'filter'],
      ['topic', 'orders'],
      ['expected', '1'],
    ]);
    expect(run.status).toBe(403);
    expect((await c.admin.counts({ status: 'dead' })).dead).toBe(1);
  });

  it('sends no secret of the options and no database error to the page', async () => {
    c = await openConsoleApp(new RecordingPublisher());
    const overview = await get(c.url);
    expect(overview.body).not.toContain(CONSOLE_TOKEN);
    expect(overview.body).not.toMatch(/postgres(ql)?:\/\//);
    // A failing query (the table is gone) is a 500 page without the driver's text.
    await c.dataSource.query(`ALTER TABLE "${c.table}" RENAME TO "${c.table}_gone"`);
    try {
      const failed = await get(`${c.url}/messages?status=dead`);
      expect(failed.status).toBe(500);
      expect(failed.body).toContain('the reason is in the server log');
      expect(failed.body).not.toMatch(/relation|does not exist/);
    } finally {
      await c.dataSource.query(`ALTER TABLE "${c.table}_gone" RENAME TO "${c.table}"`);
    }
  });
});
