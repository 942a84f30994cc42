import { ClientTCP, Transport } from '@nestjs/microservices';
import { PublisherUnavailableError } from '../../lib';
import { KafkaPublisher } from '../../lib/publishers/kafka';
import { ClientProxyPublisher } from '../../lib/publishers/microservices';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { describeWith, SERVICES } from '../support/services';
import { freePort } from '../support/transports/net';
import { startNestConsumer } from '../support/transports/nest-consumer';

// The health checks' `ping()` of each built-in publisher, against the real brokers: it resolves
// when the broker answers and rejects with PublisherUnavailableError when nothing listens.

const deadline = (ms: number): AbortSignal => AbortSignal.timeout(ms);

describeWith(['kafka'], 'KafkaPublisher.ping()', () => {
  it('resolves against the running broker and rejects for a port where nothing listens', async () => {
    const up = new KafkaPublisher({
      brokers: [`${SERVICES.kafka.host}:${SERVICES.kafka.port}`],
      clientId: 'outbox-ping',
    });
    const down = new KafkaPublisher({
      brokers: [`127.0.0.1:${await freePort()}`],
      clientId: 'outbox-ping',
      connectionTimeout: 500,
    });
    try {
      await expect(up.ping(deadline(10_000))).resolves.toBeUndefined();
      await expect(down.ping(deadline(10_000))).rejects.toBeInstanceOf(PublisherUnavailableError);
    } finally {
      await up.close();
      await down.close();
    }
  });
});

describeWith(['rabbitmq'], 'RabbitMqPublisher.ping()', () => {
  it('resolves against the running broker and rejects for a port where nothing listens', async () => {
    const { host, port } = SERVICES.rabbitmq;
    const up = new RabbitMqPublisher({ url: `amqp://guest:guest@${host}:${port}` });
    const down = new RabbitMqPublisher({
      url: `amqp://guest:guest@127.0.0.1:${await freePort()}`,
      reconnect: { initialDelayMs: 50, maxDelayMs: 100 },
    });
    try {
      await expect(up.ping(deadline(10_000))).resolves.toBeUndefined();
      await expect(down.ping(deadline(10_000))).rejects.toBeInstanceOf(PublisherUnavailableError);
    } finally {
      await up.close();
      await down.close();
    }
  });
});

describe('ClientProxyPublisher.ping()', () => {
  it('resolves while a Nest TCP server listens and rejects for a port where nothing listens', async () => {
    const port = await freePort();
    const server = await startNestConsumer(
      { transport: Transport.TCP, options: { host: '127.0.0.1', port } },
      ['ping.topic'],
    );
    const up = new ClientProxyPublisher(new ClientTCP({ host: '127.0.0.1', port }));
    const down = new ClientProxyPublisher(
      new ClientTCP({ host: '127.0.0.1', port: await freePort() }),
    );
    try {
      await expect(up.ping(deadline(10_000))).resolves.toBeUndefined();
      await expect(down.ping(deadline(10_000))).rejects.toBeInstanceOf(PublisherUnavailableError);
    } finally {
      await up.close();
      await down.close();
      await server.close();
    }
  });
});
