import { Controller, Get, Inject, type INestApplication } from '@nestjs/common';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { connect, type ChannelModel } from 'amqplib';
import {
  OutboxDispatcher,
  OutboxOptionsError,
  OutboxService,
  type OutboxPublisher,
} from '../../lib';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import {
  OutboxHealthIndicator,
  resolveOutboxHealthOptions,
  type OutboxHealthDetails,
  type OutboxHealthOptions,
} from '../../lib/integrations/terminus';
import { testDatabase } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith, SERVICES } from '../support/services';
import { freePort } from '../support/transports/net';
import { sleep, waitFor } from '../support/wait-for';

// A real Nest HTTP app with @nestjs/terminus' HealthCheckService and OutboxHealthIndicator, over
// a PostgreSQL outbox and a real RabbitMQ; the health endpoint is called over HTTP.

const db = testDatabase('postgres');
const RABBITMQ_URL = `amqp://guest:guest@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;
let counter = 0;
const unique = (what: string): string => `outbox-health-${what}-${process.pid}-${++counter}`;

const LIMITS = Symbol('health limits');

@Controller('health')
class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly outbox: OutboxHealthIndicator,
    @Inject(LIMITS) private readonly limits: OutboxHealthOptions,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([() => this.outbox.isHealthy('outbox', this.limits)]);
  }
}

interface HealthResponse {
  readonly status: number;
  readonly body: { status: string; details: { outbox: OutboxHealthDetails & { status: string } } };
}

describeWith(['postgres', 'rabbitmq'], 'OutboxHealthIndicator (@nestjs/terminus)', () => {
  const scope = useOutboxScope(db, { tablePrefix: 'outbox_health' });
  let amqp: ChannelModel;

  beforeAll(async () => {
    amqp = await connect(RABBITMQ_URL);
    amqp.on('error', () => undefined);
  });

  afterAll(async () => {
    await amqp?.close().catch(() => undefined);
  });

  async function startApp(
    publisher: OutboxPublisher,
    limits: OutboxHealthOptions,
  ): Promise<{ app: INestApplication; get: () => Promise<HealthResponse> }> {
    const { http } = await scope.open({
      publisher,
      http: true,
      imports: [TerminusModule.forRoot({ logger: false })],
      controllers: [HealthController],
      providers: [OutboxHealthIndicator, { provide: LIMITS, useValue: limits }],
      options: {
        retry: { maxAttempts: 1 },
        dispatcher: { listen: false, pollIntervalMs: 50, maxOutagePauseMs: 200 },
      },
    });
    if (http === undefined) throw new Error('the health app is not served over HTTP');
    const { app } = http;
    const url = `${http.url}/health`;
    return {
      app,
      get: async () => {
        const response = await fetch(url);
        return { status: response.status, body: (await response.json()) as HealthResponse['body'] };
      },
    };
  }

  it('is healthy with the dispatcher running and the broker reachable; unhealthy past the dead-letter limit, healthy again once purged', async () => {
    const queue = unique('q');
    const channel = await amqp.createChannel();
    await channel.assertQueue(queue, { durable: false });
    scope.defer(() => channel.deleteQueue(queue).then(() => channel.close()));
    const { app, get } = await startApp(new RabbitMqPublisher({ url: RABBITMQ_URL }), {
      maxDead: 0,
      statsMaxAgeMs: 0,
    });

    // autoStart: false, so the dispatcher does not run yet.
    const notStarted = await get();
    expect(notStarted.status).toBe(503);
    expect(notStarted.body.details.outbox).toMatchObject({
      status: 'down',
      dispatcher: 'not started',
      publisher: 'reachable',
    });
    expect(notStarted.body.details.outbox.problems).toEqual([
      expect.stringContaining('dispatcher is not started'),
    ]);

    const dispatcher = app.get(OutboxDispatcher);
    await dispatcher.start();
    const outbox = app.get(OutboxService);
    await scope.ds.transaction((m) => outbox.enqueue({ topic: queue, payload: { ok: true } }, m));
    await waitFor(
      'the message to be delivered',
      async () => (await outbox.stats()).delivered === 1,
      { timeoutMs: 15_000 },
    );
    expect(await channel.get(queue)).not.toBe(false);

    const healthy = await get();
    expect(healthy.status).toBe(200);
    expect(healthy.body.status).toBe('ok');
    expect(healthy.body.details.outbox).toEqual({
      status: 'up',
      dispatcher: 'running',
      publisher: 'reachable',
      pending: 0,
      dead: 0,
      oldestPendingAgeSeconds: null,
    });

    // No queue for this routing key: RabbitMQ returns the message, and with maxAttempts 1 it is
    // dead-lettered at once; one dead letter is over maxDead 0.
    await scope.ds.transaction((m) =>
      outbox.enqueue({ topic: unique('nowhere'), payload: { lost: true } }, m),
    );
    await waitFor('the dead letter', async () => (await outbox.stats()).dead === 1, {
      timeoutMs: 15_000,
    });
    const unhealthy = await get();
    expect(unhealthy.status).toBe(503);
    expect(unhealthy.body.status).toBe('error');
    expect(unhealthy.body.details.outbox).toMatchObject({
      status: 'down',
      dispatcher: 'running',
      publisher: 'reachable',
      dead: 1,
    });
    expect(unhealthy.body.details.outbox.problems).toEqual([
      '1 dead-lettered message(s), over the limit of 0',
    ]);

    expect(await outbox.purgeDead()).toBe(1);
    expect((await get()).status).toBe(200);
  });

  it('is unhealthy when the broker cannot be reached and the backlog ages past its limit', async () => {
    const port = await freePort(); // nothing listens there
    const { app, get } = await startApp(
      new RabbitMqPublisher({
        url: `amqp://guest:guest@127.0.0.1:${port}`,
        reconnect: { initialDelayMs: 50, maxDelayMs: 100 },
      }),
      { maxOldestPendingAgeMs: 500, statsMaxAgeMs: 0 },
    );
    await app.get(OutboxDispatcher).start();
    await scope.ds.transaction((m) =>
      app.get(OutboxService).enqueue({ topic: unique('q'), payload: {} }, m),
    );
    await sleep(700);

    const response = await get();
    expect(response.status).toBe(503);
    const details = response.body.details.outbox;
    expect(details).toMatchObject({
      status: 'down',
      dispatcher: 'running',
      publisher: 'unreachable',
      pending: 1,
      dead: 0,
    });
    expect(details.oldestPendingAgeSeconds).toBeGreaterThan(0.5);
    expect(details.problems).toEqual([
      expect.stringMatching(/^the publisher's broker is unreachable: .*ECONNREFUSED/),
      expect.stringMatching(/^the oldest pending message is \d+ s old, over the limit of 0.5 s$/),
    ]);
  });

  it('is unhealthy while one dispatcher run lasts longer than maxRunMs (a stuck loop)', async () => {
    const publisher = new RecordingPublisher();
    const { app, get } = await startApp(publisher, { maxRunMs: 1_000, statsMaxAgeMs: 0 });
    const [id] = await scope.ds.transaction((m) =>
      app.get(OutboxService).enqueue([{ topic: unique('q'), payload: {} }], m),
    );
    // The publish hangs until the dispatcher's publish deadline (10 s by default).
    publisher.fail(id as string, 'hang');
    await app.get(OutboxDispatcher).start();
    await waitFor(
      'the health check to report the stuck run',
      async () => {
        const response = await get();
        return (
          response.status === 503 &&
          (response.body.details.outbox.problems ?? []).some((p) => p.includes('current run'))
        );
      },
      { timeoutMs: 15_000 },
    );
    expect(app.get(OutboxDispatcher).status()).toMatchObject({ started: true });
    expect(app.get(OutboxDispatcher).status().runningForMs).toBeGreaterThan(1_000);
  });
});

describe('OutboxHealthIndicator options', () => {
  it('applies the documented defaults and refuses unknown or invalid limits', () => {
    expect(resolveOutboxHealthOptions()).toEqual({
      maxOldestPendingAgeMs: 300_000,
      maxDead: null,
      requireDispatcher: true,
      maxRunMs: 600_000,
      pingTimeoutMs: 3_000,
      statsTimeoutMs: 5_000,
      statsMaxAgeMs: 10_000,
      maxLogRetainedBytes: 1_073_741_824,
    });
    expect(resolveOutboxHealthOptions({ maxLogRetainedBytes: null }).maxLogRetainedBytes).toBe(
      null,
    );
    expect(resolveOutboxHealthOptions({ maxOldestPendingAgeMs: null }).maxOldestPendingAgeMs).toBe(
      null,
    );
    expect(() => resolveOutboxHealthOptions({ maxDaed: 0 } as OutboxHealthOptions)).toThrow(
      /maxDaed is not an option; did you mean maxDead\?/,
    );
    expect(() => resolveOutboxHealthOptions({ maxDead: -1 })).toThrow(OutboxOptionsError);
  });
});
