import { OutboxOptionsError } from '../../lib';
import { openConsoleApp, type ConsoleApp, type ConsoleHttp } from '../support/console-app';
import {
  auth,
  countOf,
  get,
  post,
  rejectingPublisher,
  SCRIPT,
  tokenOf,
} from '../support/console-http';
import { describeWith } from '../support/services';
import { waitFor } from '../support/wait-for';

// The console on a real Fastify app (Nest's FastifyAdapter) on PostgreSQL: the same pages,
// refusals and actions as on Express, checked over HTTP and in the table, and what happens when
// the app does not parse HTML forms.

const fastify: ConsoleHttp = { adapter: 'fastify' };

describeWith(['postgres'], 'OutboxConsoleModule over HTTP (PostgreSQL, Fastify)', () => {
  let c: ConsoleApp | undefined;
  afterEach(async () => {
    await c?.close();
    c = undefined;
  });

  async function withDeadLetters(
    http: ConsoleHttp = fastify,
  ): Promise<{ orders: string[]; billing: string[] }> {
    c = await openConsoleApp(rejectingPublisher(), {}, http);
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

  it('renders every page, with its security headers, and a <script> payload as text', async () => {
    const { orders, billing } = await withDeadLetters();
    const overview = await waitFor('the sampled backlog', async () => {
      const page = await get(c!.url);
      return page.status === 200 && page.body.includes('id="total-dead">5<') ? page.body : null;
    });
    expect(overview).toMatch(
      /<tr><td>billing<\/td><td>0<\/td><td>0<\/td><td>0<\/td>\s*<td><a href="\/outbox\/messages\?status=dead&amp;topic=billing">2<\/a><\/td><td>–<\/td><td>0<\/td><td>2<\/td><td>(<svg class="spark".*?<\/svg>)?<\/td><\/tr>/,
    );

    const res = await fetch(`${c!.url}/messages?status=dead`, { headers: auth });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(res.headers.get('content-security-policy')).toMatch(/default-src 'none'/);
    expect(res.headers.get('x-frame-options')).toBe('DENY');
    const list = await res.text();
    for (const id of [...orders, ...billing]) expect(list).toContain(id);
    const paid = await get(`${c!.url}/messages?status=dead&topic=orders&type=order.paid`);
    expect(paid.body).toContain(orders[2]);
    expect(paid.body).not.toContain(orders[0]);

    const detail = await get(`${c!.url}/messages/${orders[0]}`);
    expect(detail.status).toBe(200);
    expect(detail.body).not.toContain('<script>document');
    expect(detail.body).toContain(
      '&lt;script&gt;document.title=\\&quot;pwned\\&quot;&lt;/script&gt;',
    );
    expect(detail.body).toContain('schema v2 unknown');

    for (const path of ['/blocked-keys', '/stuck-leases', `/why?id=${billing[0]}`, '/audit']) {
      const page = await get(`${c!.url}${path}`);
      expect(`${path} ${page.status}`).toBe(`${path} 200`);
      expect(page.body).toContain('<title>');
    }
    const css = await fetch(`${c!.url}/assets/console.css`, { headers: auth });
    expect([css.status, css.headers.get('content-type')]).toEqual([200, 'text/css; charset=utf-8']);
    const js = await fetch(`${c!.url}/assets/console.js`, { headers: auth });
    expect([js.status, js.headers.get('content-type')]).toEqual([
      200,
      'text/javascript; charset=utf-8',
    ]);

    const bad = await get(`${c!.url}/messages?status=dead&olderThanMinutes=-5`);
    expect(bad.status).toBe(400);
    expect(bad.body).toMatch(/olderThanMinutes must be a number of minutes, 0 or more/);
    expect((await get(`${c!.url}/messages/00000000-0000-4000-8000-000000000000`)).status).toBe(404);
  });

  it('refuses anonymous and wrongly authorised requests, pages and actions alike', async () => {
    const { orders } = await withDeadLetters();
    for (const headers of [{}, { authorization: 'Bearer wrong' }] as Record<string, string>[]) {
      const page = await get(`${c!.url}/messages?status=dead`, headers);
      expect(page.status).toBe(401);
      expect(page.body).toContain('<h1>Sign in to open the outbox console</h1>');
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

  it('refuses actions without the page token or from another site', async () => {
    await withDeadLetters();
    const token = tokenOf((await get(`${c!.url}/messages?status=dead`)).body);
    expect(token).not.toBe('');
    const form: [string, string][] = [
      ['action', 'purge'],
      ['scope', 'filter'],
      ['topic', 'orders'],
      ['expected', '3'],
    ];
    const refusals = [
      await post(`${c!.url}/actions/run`, form),
      await post(`${c!.url}/actions/run`, [...form, ['csrf', 'forged.token']]),
      await post(`${c!.url}/actions/run`, [...form, ['csrf', token]], {
        ...auth,
        'sec-fetch-site': 'cross-site',
      }),
      await post(`${c!.url}/actions/run`, [...form, ['csrf', token]], {
        ...auth,
        origin: 'https://evil.example',
      }),
    ];
    expect(refusals.map((r) => r.status)).toEqual([403, 403, 403, 403]);
    expect(refusals[0]?.body).toContain('the form has no console token');
    expect((await c!.admin.counts({ status: 'dead' })).dead).toBe(5);
  });

  it('checks Origin against X-Forwarded-Host only when Fastify trusts the proxy (trustProxy)', async () => {
    // A proxy serves the console at https://ops.example and sends Host: 127.0.0.1:<port>.
    const viaProxy = { ...auth, origin: 'https://ops.example', 'x-forwarded-host': 'ops.example' };
    const form = (token: string): [string, string][] => [
      ['csrf', token],
      ['action', 'purge'],
      ['scope', 'filter'],
      ['topic', 'orders'],
      ['expected', '3'],
    ];
    await withDeadLetters();
    const untrusted = await post(
      `${c!.url}/actions/run`,
      form(tokenOf((await get(`${c!.url}/messages?status=dead`)).body)),
      viaProxy,
    );
    expect(untrusted.status).toBe(403);
    expect(untrusted.body).toMatch(/another origin/);
    expect((await c!.admin.counts({ status: 'dead' })).dead).toBe(5);
    await c!.close();
    c = undefined;

    await withDeadLetters({ ...fastify, trustProxy: true });
    const token = tokenOf((await get(`${c!.url}/messages?status=dead`)).body);
    const elsewhere = await post(`${c!.url}/actions/run`, form(token), {
      ...viaProxy,
      origin: 'https://evil.example',
    });
    expect(elsewhere.status).toBe(403);
    const trusted = await post(`${c!.url}/actions/run`, form(token), viaProxy);
    expect(trusted.status).toBe(200);
    expect((await c!.admin.counts({ status: 'dead' })).dead).toBe(2);
  });

  it('purges by filter exactly the dead letters the confirmation counted, and audits it', async () => {
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
    expect((await c!.admin.counts({ status: 'dead' })).dead).toBe(5);

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
    const rows = await c!.dataSource.query<{ n: string }[]>(
      `SELECT count(*) AS n FROM "${c!.table}"`,
    );
    expect(Number(rows[0]?.n)).toBe(3);

    expect((await get(`${c!.url}/audit`)).body).toMatch(
      /<td>anonymous@127\.0\.0\.1<\/td><td>purge<\/td><td>filter: topic=&quot;orders&quot; type=&quot;order.created&quot;<\/td><td>2<\/td><td>2<\/td>/,
    );
  });

  it('retries a selection: the message leaves the dead letters and is published again', async () => {
    const publisher = rejectingPublisher();
    c = await openConsoleApp(publisher, {}, fastify);
    const [first, second] = await c.enqueue([
      { topic: 'orders', key: 'r-1', payload: { n: 1 } },
      { topic: 'orders', key: 'r-2', payload: { n: 2 } },
    ]);
    await c.dispatcher.drain();
    publisher.heal();
    const token = tokenOf((await get(`${c.url}/messages?status=dead`)).body);
    const form: [string, string][] = [
      ['csrf', token],
      ['action', 'retry'],
      ['scope', 'selection'],
      ['id', first!],
    ];
    expect(countOf((await post(`${c.url}/actions/confirm`, form)).body, 'matched')).toBe(1);
    const run = await post(`${c.url}/actions/run`, [...form, ['expected', '1']]);
    expect(countOf(run.body, 'result')).toBe(1);
    expect((await c.admin.get(first!))?.status).toBe('pending');
    await c.dispatcher.drain();
    expect((await c.admin.get(first!))?.status).toBe('delivered');
    expect(publisher.attemptsOf(first!)).toBe(2);
    expect((await c.admin.get(second!))?.status).toBe('dead');
    // The overview's throughput: in the last minute one delivered, and one dead-lettered (the
    // retried message's dead_at went with its retry).
    const overview = await waitFor('the delivery in the sampled throughput', async () => {
      const page = await get(c!.url);
      return page.body.includes('id="delivered-per-minute">1<') ? page.body : null;
    });
    expect(overview).toContain('id="dead-per-minute">1<');
    expect(overview).toMatch(
      /<tr><td>orders<\/td>.*?<td>–<\/td><td>1<\/td><td>1<\/td><td>(<svg class="spark".*?<\/svg>)?<\/td><\/tr>/,
    );
  });

  it('with bodyParser: false, refuses to start until @fastify/formbody is registered, then acts', async () => {
    const noParser: ConsoleHttp = { adapter: 'fastify', bodyParser: false };
    // An app that started after all is closed at once, so the failed expectation leaks nothing.
    const started = openConsoleApp(rejectingPublisher(), {}, noParser).then(async (app) => {
      await app.close();
      return app;
    });
    await expect(started).rejects.toThrow(OutboxOptionsError);
    await expect(started).rejects.toThrow(
      /parses no application\/x-www-form-urlencoded body.*await app\.register\(fastifyFormbody\)/,
    );

    // A read-only console posts no form, so it needs no parser.
    c = await openConsoleApp(rejectingPublisher(), { readOnly: true }, noParser);
    expect((await get(c.url)).status).toBe(200);
    await c.close();
    c = undefined;

    const { orders } = await withDeadLetters({ ...noParser, formbody: true });
    const token = tokenOf((await get(`${c!.url}/messages?status=dead`)).body);
    const run = await post(`${c!.url}/actions/run`, [
      ['csrf', token],
      ['action', 'purge'],
      ['scope', 'selection'],
      ['id', orders[1]!],
      ['expected', '1'],
    ]);
    expect(run.status).toBe(200);
    expect(countOf(run.body, 'result')).toBe(1);
    expect(await c!.admin.get(orders[1]!)).toBeNull();
    expect((await c!.admin.counts({ status: 'dead' })).dead).toBe(4);
  });
});
