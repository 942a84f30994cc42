import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { connect, type Channel, type ChannelModel } from 'amqplib';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { CONSOLE_TOKEN, openConsoleApp, type ConsoleApp } from '../support/console-app';
import { describeWith, SERVICES } from '../support/services';
import { waitFor } from '../support/wait-for';

// The console in a real browser: the machine's Chromium (apt-get install chromium; .ci/run
// installs it) driven by playwright-core, against a Nest app on PostgreSQL whose RabbitMQ
// publisher dead-letters messages for real (their queue does not exist yet: RabbitMQ returns
// them unroutable). Every step clicks what an operator clicks and checks the table or the queue.

const CHROMIUM = process.env.OUTBOX_CHROMIUM ?? '/usr/bin/chromium';
const RABBITMQ_URL = `amqp://${process.env.RABBITMQ_USER ?? 'guest'}:${process.env.RABBITMQ_PASSWORD ?? 'guest'}@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;
const SCREENSHOTS = process.env.OUTBOX_CONSOLE_SCREENSHOTS; // e.g. docs/images: refreshes the README's pictures
const XSS = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">';

function describeWithChromium(name: string, fn: () => void): void {
  if (existsSync(CHROMIUM)) {
    describeWith(['postgres', 'rabbitmq'], name, fn);
  } else if (process.env.CI === 'true') {
    describe(name, () =>
      it('needs Chromium', () => {
        throw new Error(
          `CI=true and no Chromium at ${CHROMIUM} (.ci/run installs it with apt-get install -y chromium)`,
        );
      }),
    );
  } else {
    describe.skip(`${name} [skipped: no Chromium at ${CHROMIUM}: apt-get install -y chromium]`, fn);
  }
}

describeWithChromium('The outbox console in Chromium (PostgreSQL, RabbitMQ)', () => {
  const queue = `outbox_console_${process.pid}_${Date.now()}`;
  let browser: Browser;
  let amqp: ChannelModel;
  let channel: Channel;
  let c: ConsoleApp;
  let operator: BrowserContext;
  let page: Page;

  beforeAll(async () => {
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox'],
    });
    amqp = await connect(RABBITMQ_URL);
    channel = await amqp.createChannel();
    await channel.deleteQueue(queue);
    const publisher = new RabbitMqPublisher({
      url: RABBITMQ_URL,
      exchange: '',
      routingKey: () => queue,
    });
    c = await openConsoleApp(publisher);
    // The operator signs in the way the app's authorize callback expects.
    operator = await browser.newContext({
      extraHTTPHeaders: { authorization: `Bearer ${CONSOLE_TOKEN}` },
    });
    page = await operator.newPage();
  });

  afterAll(async () => {
    await operator?.close();
    await browser?.close();
    await c?.close();
    await channel?.deleteQueue(queue);
    await amqp?.close();
  });

  /** The message ids of the listed rows, in order. */
  async function rows(): Promise<string[]> {
    const trs = page.locator('#messages tbody tr');
    const ids: string[] = [];
    for (let i = 0; i < (await trs.count()); i++) {
      ids.push((await trs.nth(i).getAttribute('data-message-id')) ?? '');
    }
    return ids;
  }

  async function shoot(name: string): Promise<void> {
    if (SCREENSHOTS === undefined) return;
    mkdirSync(SCREENSHOTS, { recursive: true });
    await page.screenshot({ path: join(SCREENSHOTS, name), fullPage: true });
  }

  let orders: string[] = [];
  let billing: string[] = [];

  it('refuses a visitor who is not signed in', async () => {
    const anonymous = await browser.newContext();
    try {
      const visit = await (await anonymous.newPage()).goto(c.url);
      expect(visit?.status()).toBe(401);
      expect(await visit?.text()).not.toMatch(/Dead letters<\/a>.*<table/s);
    } finally {
      await anonymous.close();
    }
  });

  it('lists the dead letters a failing publisher made, and filters them', async () => {
    orders = await c.enqueue([
      { topic: 'orders', type: 'order.created', key: 'o-1', payload: { note: XSS } },
      { topic: 'orders', type: 'order.created', key: 'o-2', payload: { total: 42 } },
      { topic: 'orders', type: 'order.paid', key: 'o-3', payload: { total: 7 } },
    ]);
    billing = await c.enqueue([
      { topic: 'billing', type: 'invoice.sent', key: 'b-1', payload: { n: 1 } },
      { topic: 'billing', type: 'invoice.sent', key: 'b-2', payload: { n: 2 } },
    ]);
    await c.dispatcher.drain();
    expect((await c.admin.counts({ status: 'dead' })).dead).toBe(5);

    await page.goto(c.url);
    await page.getByRole('link', { name: 'Dead letters', exact: true }).click();
    expect(await rows()).toEqual([...orders, ...billing]);
    expect(await page.locator('#messages').innerText()).toMatch(/NO_ROUTE/);
    await shoot('console-dead-letters.png');

    await page.getByLabel('Topic').fill('billing');
    await page.getByRole('button', { name: 'Filter' }).click();
    expect(await rows()).toEqual(billing);
    await page.getByLabel('Topic').fill('');
    await page.getByLabel('Type').fill('order.paid');
    await page.getByRole('button', { name: 'Filter' }).click();
    expect(await rows()).toEqual([orders[2]]);
  });

  it('shows a payload with <script> as text, and runs none of it', async () => {
    await page.goto(`${c.url}/messages/${orders[0]}`);
    expect(await page.locator('#payload').innerText()).toContain(XSS.replace(/"/g, '\\"'));
    expect(await page.evaluate(() => (globalThis as { pwned?: number }).pwned)).toBeUndefined();
    expect(await page.locator('#why').innerText()).toMatch(/Dead-lettered .* after 1 attempt/);
    await shoot('console-message.png');
  });

  it('purges by filter after a confirmation showing the exact count', async () => {
    await page.goto(`${c.url}/messages?status=dead`);
    await page.getByLabel('Topic').fill('billing');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.getByRole('button', { name: 'Purge all matching…' }).click();
    expect(await page.locator('#matched').getAttribute('data-count')).toBe('2');
    expect(await page.locator('h1').innerText()).toBe('Purge 2 dead letters?');
    await shoot('console-confirm.png');
    // Nothing is deleted until the operator confirms.
    expect((await c.admin.counts({ status: 'dead' })).dead).toBe(5);
    await page.locator('#confirm').click();
    expect(await page.locator('#result').getAttribute('data-count')).toBe('2');
    expect((await c.admin.list({ status: 'dead' })).items.map((m) => m.messageId)).toEqual(orders);
  });

  it('retries a ticked dead letter: RabbitMQ gets it and it leaves the list', async () => {
    await channel.assertQueue(queue, { durable: false });
    await page.goto(`${c.url}/messages?status=dead`);
    await page.getByLabel(`select ${orders[1]}`).check();
    await page.getByRole('button', { name: 'Retry selected…' }).click();
    expect(await page.locator('#matched').getAttribute('data-count')).toBe('1');
    await page.locator('#confirm').click();
    expect(await page.locator('#result').getAttribute('data-count')).toBe('1');

    await c.dispatcher.drain();
    const delivered = await waitFor('the retried message in the queue', async () => {
      const got = await channel.get(queue, { noAck: true });
      return got === false ? null : got;
    });
    expect(delivered.properties.messageId).toBe(orders[1]);
    expect(JSON.parse(delivered.content.toString())).toEqual({ total: 42 });
    expect((await c.admin.get(orders[1]!))?.status).toBe('delivered');

    await page.getByRole('link', { name: 'Dead letters', exact: true }).click();
    expect(await rows()).toEqual([orders[0], orders[2]]);
    await page.getByRole('link', { name: 'Audit log' }).click();
    expect(await page.locator('#audit tbody tr').allInnerTexts()).toEqual([
      expect.stringMatching(/retry\s+selection: ids .*\s+1\s+1$/),
      expect.stringMatching(/purge\s+filter: topic="billing"\s+2\s+2$/),
    ]);
  });

  it('shows the backlog', async () => {
    await page.goto(c.url);
    // Pages read the sampler's last count (every second here): wait for one after the retry.
    await waitFor('the sampled backlog', async () => {
      await page.reload();
      return /orders\s+0\s+0\s+0\s+2/.test(await page.locator('#topics').innerText());
    });
    expect(await page.locator('#total-dead').innerText()).toBe('2');
    await shoot('console-backlog.png');
  });
});
