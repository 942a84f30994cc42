import { Injectable } from '@nestjs/common';
import { OnOutboxDeadLetter, type OutboxFallbackResult } from '../../lib';
import { openConsoleApp, type ConsoleApp } from '../support/console-app';
import { get, rejectingPublisher, squash } from '../support/console-http';
import { describeWith } from '../support/services';

// The console shows the policies the dispatcher delivers under (the module's defaults and each
// event type's) on its overview, and on a message's page the policy of its type.

/** Settles every dead `order.paid` elsewhere. */
@Injectable()
class PaidFallback {
  @OnOutboxDeadLetter('order.paid')
  settle(): OutboxFallbackResult {
    return { settled: true };
  }
}

describeWith(['postgres'], 'the console shows per-event policies (PostgreSQL)', () => {
  let c: ConsoleApp | undefined;
  afterEach(async () => {
    await c?.close();
    c = undefined;
  });

  it("lists the policies on the overview and names a dead message's policy on its page", async () => {
    c = await openConsoleApp(rejectingPublisher(), {
      policies: { 'order.paid': { onDeadLetter: 'skip', maxAgeMs: 60_000 } },
    });
    const [paid, created] = await c.enqueue([
      { topic: 'orders', type: 'order.paid', key: 'o-1', payload: { n: 1 } },
      { topic: 'orders', type: 'order.created', key: 'o-2', payload: { n: 2 } },
    ]);
    await c.dispatcher.drain();

    const overview = squash((await get(c.url)).body);
    expect(overview).toContain('<table id="policies">');
    expect(overview).toMatch(
      /<td><span class="muted">every other type<\/span><\/td>\s*<td><span class="badge">default<\/span> onDeadLetter block, maxAttempts 1,[^<]*expiry none/,
    );
    expect(overview).toMatch(
      /<td>\s*order\.paid\s*<\/td>\s*<td><span class="badge">order\.paid<\/span> onDeadLetter skip, maxAttempts 1,[^<]*expiry 1 min 0 s/,
    );

    const page = squash((await get(`${c.url}/messages/${paid as string}`)).body);
    expect(page).toMatch(
      /<td id="policy"><span class="badge">order\.paid<\/span> onDeadLetter skip/,
    );
    expect(page).toContain(
      'Dead under policy &#39;order.paid&#39;: onDeadLetter &#39;skip&#39;, so later messages of its key go on.',
    );
    const other = squash((await get(`${c.url}/messages/${created as string}`)).body);
    expect(other).toMatch(/<td id="policy"><span class="badge">default<\/span> onDeadLetter block/);
  });

  it("shows a fallback's run in the message's attempt history", async () => {
    c = await openConsoleApp(rejectingPublisher(), { providers: [PaidFallback] });
    const [paid] = await c.enqueue([
      { topic: 'orders', type: 'order.paid', key: 'o-1', payload: { n: 1 } },
    ]);
    await c.dispatcher.drain();

    const page = squash((await get(`${c.url}/messages/${paid as string}`)).body);
    expect(page).toMatch(
      /<tr><td>1<\/td><td><span class="badge">fallback<\/span><\/td><td>[^<]+<\/td><td>[^<]+<\/td><td>PermanentPublishError<\/td><td class="error">fallback PaidFallback\.settle settled it after: PermanentPublishError: [^<]*<\/td><\/tr>/,
    );
  });
});
