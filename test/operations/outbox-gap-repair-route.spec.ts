import { Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { OutboxOptionsError } from '../../lib';
import { OutboxAuditStore } from '../../lib/admin';
import { GapRepairRequestError, httpGapRepairClient, type GapRepairRequest } from '../../lib/inbox';
import {
  OutboxGapRepairModule,
  type OutboxGapRepairModuleOptions,
} from '../../lib/operations/gap-repair';
import { RecordingPublisher } from '../../lib/testing';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import { testDatabase, uniqueTable } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';
import { sleep } from '../support/wait-for';

// The gap-repair route's HTTP side on a real app (the answers themselves are proven on every
// database in outbox-gap-repair.spec.ts): access checked by a guard or a callback, refused at
// bootstrap without one, and each outcome mapped to its status.

const db = testDatabase('postgres');

@Injectable()
class ServiceTokenGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ headers: Record<string, unknown> }>();
    return request.headers['x-service-token'] === 'let-me-in';
  }
}

const request: GapRepairRequest = {
  topic: 'orders',
  key: 'k',
  sequences: [1],
  consumer: 'billing',
};

describeWith(['postgres'], 'gap repair route', () => {
  const scope = useOutboxScope(db, { tablePrefix: 'outbox_grr' });

  async function serve(route: Partial<OutboxGapRepairModuleOptions>) {
    const auditTable = { tableName: uniqueTable('outbox_grr_aud') };
    const audit = new OutboxAuditStore(typeormSqlPort(scope.ds), auditTable);
    await audit.ensure();
    scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS ${audit.names.table}`));
    const app = await scope.open({
      publisher: new RecordingPublisher(),
      http: true,
      imports: [OutboxGapRepairModule.forRoot({ auditTable, ...route })],
      options: { ordering: { sequence: true }, dispatcher: { listen: false } },
    });
    await app.enqueue([{ topic: 'orders', key: 'k', type: 't', payload: {} }]);
    await app.runUntilIdle();
    return { app, url: `${app.http?.url ?? ''}${route.path ?? '/outbox/gap-repair'}` };
  }

  it("answers through a guard class with the route's options, and refuses callers it turns away", async () => {
    const { app, url } = await serve({
      guard: ServiceTokenGuard,
      path: '/internal/gap-repair',
      resendAfterMs: 1,
    });
    const allowed = httpGapRepairClient({ url, headers: { 'x-service-token': 'let-me-in' } });
    expect(await allowed.request(request)).toMatchObject({ status: 'answered', resent: [1] });
    // resendAfterMs reaches the answer: its copy delivered 1 ms ago is sent again.
    await app.runUntilIdle();
    await sleep(5);
    expect(await allowed.request(request)).toMatchObject({ resent: [1] });
    const refused = httpGapRepairClient({ url, headers: { 'x-service-token': 'nope' } });
    await expect(refused.request(request)).rejects.toMatchObject({
      name: 'GapRepairRequestError',
      status: 403,
    });
  });

  it('maps bad requests to 400 and the rate limit to 429 with Retry-After', async () => {
    const { url } = await serve({
      authorize: (r) => r.headers.authorization === 'Bearer t',
      ratePerSecond: 0.01,
      burst: 1,
    });
    const headers = { authorization: 'Bearer t', 'content-type': 'application/json' };
    const bad = await fetch(url, {
      method: 'POST',
      headers,
      body: JSON.stringify({ ...request, sequences: [0] }),
    });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { message: string }).message).toMatch(/sequences/);
    const first = await fetch(url, { method: 'POST', headers, body: JSON.stringify(request) });
    expect(first.status).toBe(200);
    const limited = await fetch(url, { method: 'POST', headers, body: JSON.stringify(request) });
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    // The client reads a 429 as the answer it carries.
    const client = httpGapRepairClient({ url, headers: { authorization: 'Bearer t' } });
    expect(await client.request(request)).toMatchObject({ status: 'rate-limited' });
    const anonymous = httpGapRepairClient({ url });
    await expect(anonymous.request(request)).rejects.toBeInstanceOf(GapRepairRequestError);
  });

  it('refuses to start without an access check, or on an outbox that does not number', async () => {
    await expect(serve({})).rejects.toThrow(/guard.*authorize.*unsafeAllowAnonymous: true/s);
    await expect(serve({ path: 'no-slash', unsafeAllowAnonymous: true })).rejects.toBeInstanceOf(
      OutboxOptionsError,
    );
    const auditTable = { tableName: uniqueTable('outbox_grr_aud') };
    await expect(
      scope.open({
        publisher: new RecordingPublisher(),
        imports: [OutboxGapRepairModule.forRoot({ auditTable, unsafeAllowAnonymous: true })],
      }),
    ).rejects.toThrow(/ordering: \{ sequence: true \}/);
  });
});
