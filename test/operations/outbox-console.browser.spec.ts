import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { connect, type Channel, type ChannelModel } from 'amqplib';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { RecordingPublisher } from '../../lib/testing';
import { ensureOutboxConsoleAuditTable } from '../../lib/operations/console';
import { CONSOLE_TOKEN, openConsoleApp, type ConsoleApp } from '../support/console-app';
import { testDatabase, uniqueTable } from '../support/databases';
import { describeWith, SERVICES } from '../support/services';
import { sleep, waitFor } from '../support/wait-for';

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
  const auditTableName = uniqueTable('console_audit');
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
    // An audit table, which re-drives are recorded in.
    const postgres = testDatabase('postgres');
    const scratch = uniqueTable('outbox_console');
    const setup = await postgres.open(scratch);
    await ensureOutboxConsoleAuditTable(setup, { tableName: auditTableName });
    await postgres.close(setup, scratch);
    // A 'leases' app: the pages of stuck leases and the partitions page's "not in use" read it.
    c = await openConsoleApp(publisher, { auditTableName, dispatcher: { claims: 'leases' } });
    // The operator signs in the way the app's authorize callback expects.
    operator = await browser.newContext({
      extraHTTPHeaders: { authorization: `Bearer ${CONSOLE_TOKEN}` },
    });
    page = await operator.newPage();
  });

  afterAll(async () => {
    await operator?.close();
    await browser?.close();
    await c?.dataSource.query(`DROP TABLE IF EXISTS "${auditTableName}"`);
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
      // Styled (the stylesheet is not behind the guard), and it says what to do.
      const refused = anonymous.pages()[0]!;
      expect(
        await refused.locator('.notice').evaluate(
          (el) =>
            (
              globalThis as unknown as {
                getComputedStyle(e: unknown): { borderLeftWidth: string };
              }
            ).getComputedStyle(el).borderLeftWidth,
        ),
      ).toBe('4px');
      expect(await refused.locator('#sign-in-help').innerText()).toMatch(/reload this page/);
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

  it('fits a 420 px wide screen: tables scroll inside the page, which does not overflow', async () => {
    const narrow = await browser.newContext({
      extraHTTPHeaders: { authorization: `Bearer ${CONSOLE_TOKEN}` },
      viewport: { width: 420, height: 900 },
    });
    try {
      const phone = await narrow.newPage();
      for (const [path, table] of [
        ['', '#topics'],
        ['/messages?status=dead', '#messages'],
        [`/messages/${orders[0]}`, '#fields'],
        ['/audit', '#audit'],
        ['/redrive?topic=orders', '#redrive-sample'],
      ] as const) {
        await phone.goto(`${c.url}${path}`);
        const width = await phone
          .locator('html')
          .evaluate((el) => (el as unknown as { scrollWidth: number }).scrollWidth);
        expect({ path, width }).toEqual({ path, width: 420 });
        const box = await phone.locator(table).boundingBox();
        expect(box !== null && box.x >= 0 && box.x + box.width <= 420).toBe(true);
        if (SCREENSHOTS !== undefined) {
          await phone.screenshot({
            path: join(SCREENSHOTS, `console-420${path.replace(/[^a-z]+/g, '-')}.png`),
            fullPage: true,
          });
        }
      }
    } finally {
      await narrow.close();
    }
  });

  it('reloads a page at the interval chosen in its Refresh control, until the operator types', async () => {
    await page.goto(`${c.url}/messages?status=dead&topic=orders`);
    await page.locator('#refresh').selectOption('5');
    await page.waitForURL(/refresh=5/);
    expect([...new URL(page.url()).searchParams]).toEqual([
      ['status', 'dead'],
      ['topic', 'orders'],
      ['refresh', '5'],
    ]);
    const marked = (): Promise<unknown> =>
      page.evaluate(() => (globalThis as { marker?: number }).marker);
    await page.evaluate(() => ((globalThis as { marker?: number }).marker = 1));
    await page.waitForEvent('load', { timeout: 10_000 });
    expect(await marked()).toBeUndefined();
    expect(await page.locator('#refresh').inputValue()).toBe('5');

    // Typing stops the reloads: what the operator writes is not thrown away.
    await page.getByLabel('Type').fill('order.paid');
    await page.evaluate(() => ((globalThis as { marker?: number }).marker = 2));
    expect(await page.locator('#refresh-state').innerText()).toBe('paused while you edit');
    await sleep(6_500);
    expect(await marked()).toBe(2);
    expect(await page.getByLabel('Type').inputValue()).toBe('order.paid');
  });

  // Issue 75, item 18: the dispatchers' delivery partitions, a page of their own.
  it('shows the delivery partitions: not in use on this app; on one that delivers by partitions, its dispatcher, share and moves', async () => {
    await page.goto(c.url);
    await page.getByRole('link', { name: 'Delivery partitions', exact: true }).click();
    expect(await page.locator('h1').innerText()).toBe('Delivery partitions');
    expect(await page.locator('#not-in-use').innerText()).toMatch(
      /^Delivery partitions are not in use on .*: no dispatcher delivers it by partitions \(this app's dispatcher\.claims is 'leases'/,
    );
    const partitioned = await openConsoleApp(new RecordingPublisher(), {
      autoStart: true,
      instanceId: 'browser-p',
      dispatcher: { claims: 'partitions', partitionTimeoutMs: 3_000 },
    });
    try {
      await page.goto(`${partitioned.url}/delivery-partitions`);
      await waitFor('every partition held', async () => {
        await page.reload();
        return (await page.locator('#partitions-free').innerText()) === '0';
      });
      expect(await page.locator('#partition-dispatchers tbody tr').allInnerTexts()).toEqual([
        expect.stringMatching(
          /^browser-p#[0-9a-f]+\s+browser-p\s+delivering\s+[0-9]+ ms ago\s+3 s\s+256\s+100 %\s+0-255\s/,
        ),
      ]);
      expect(await page.locator('#partition-moves tbody tr').allInnerTexts()).toEqual([
        expect.stringMatching(/\sbrowser-p#[0-9a-f]+\s+256\s+0-255$/),
      ]);
      // Every partition, folded away until asked for.
      expect(await page.locator('#partition-owners').isVisible()).toBe(false);
      await page.getByText('Every partition', { exact: true }).click();
      expect(await page.locator('#partition-owners').isVisible()).toBe(true);
      expect(await page.locator('#partition-owners tbody tr').count()).toBe(256);
      await shoot('console-delivery-partitions.png');

      const narrow = await browser.newContext({
        extraHTTPHeaders: { authorization: `Bearer ${CONSOLE_TOKEN}` },
        viewport: { width: 420, height: 900 },
      });
      try {
        const phone = await narrow.newPage();
        await phone.goto(`${partitioned.url}/delivery-partitions`);
        const width = await phone
          .locator('html')
          .evaluate((el) => (el as unknown as { scrollWidth: number }).scrollWidth);
        expect(width).toBe(420);
      } finally {
        await narrow.close();
      }
    } finally {
      await partitioned.close();
    }
  });

  it('re-drives a delivered message from the Re-drive page: RabbitMQ gets a copy with its headers', async () => {
    await page.goto(c.url);
    await page.getByRole('link', { name: 'Re-drive', exact: true }).click();
    expect(await page.locator('#redrive-history').innerText()).toBe('No re-drive yet.');
    await page.getByLabel('Key').fill('o-2');
    await page.getByRole('button', { name: 'Preview' }).click();
    expect(await page.locator('#matched').getAttribute('data-count')).toBe('1');
    expect(await page.locator('#redrive-sample').innerText()).toContain(orders[1]);
    await shoot('console-redrive.png');
    await page.getByLabel('Reason').fill('consumer restored from backup');
    await page.locator('#confirm').click();
    expect(await page.locator('#result').getAttribute('data-count')).toBe('1');

    await c.dispatcher.drain();
    const copy = await waitFor('the re-driven copy in the queue', async () => {
      const got = await channel.get(queue, { noAck: true });
      return got === false ? null : got;
    });
    expect(copy.properties.messageId).not.toBe(orders[1]);
    expect(copy.properties.headers?.['x-outbox-redrive-of']).toBe(orders[1]);
    expect(JSON.parse(copy.content.toString())).toEqual({ total: 42 });

    await page.getByRole('link', { name: 'Re-drive', exact: true }).click();
    expect(await page.locator('#redrive-history tbody tr').allInnerTexts()).toEqual([
      expect.stringMatching(/consumer restored from backup\s+key="o-2"\s+own topics\s+1\s/),
    ]);
  });
});
