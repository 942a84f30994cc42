import { Logger, type INestApplication, type NestApplicationOptions } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { MicroserviceOptions } from '@nestjs/microservices';
import { AppModule } from './app.module';
import { SampleConfig } from './config/sample.config';
import { consumerOptions } from './config/transport.options';

/**
 * Builds the orders app (HTTP API, outbox, consumer microservice) without starting it. Tests use
 * it to run the sample in process; `bootstrap()` starts it.
 */
export async function createSampleApp(
  config: SampleConfig,
  options: NestApplicationOptions = {},
): Promise<INestApplication> {
  const app = await NestFactory.create(AppModule.forRoot(config), {
    abortOnError: false,
    ...options,
  });
  app.connectMicroservice<MicroserviceOptions>(consumerOptions(config.transport));
  // SIGTERM / SIGINT close the app: the outbox dispatcher finishes its batch, then the clients
  // and the DataSource close.
  app.enableShutdownHooks();
  return app;
}

/** Starts the sample (consumer first, then HTTP) and logs where it listens. */
export async function bootstrap(
  config: SampleConfig = SampleConfig.fromEnv(),
  options: NestApplicationOptions = {},
): Promise<INestApplication> {
  const app = await createSampleApp(config, options);
  try {
    await app.startAllMicroservices();
    await app.listen(config.port);
  } catch (error) {
    await app.close();
    throw error;
  }
  // The bound port, which differs from config.port when that is 0.
  const { port } = new URL(await app.getUrl());
  Logger.log(
    `Orders sample listening on http://localhost:${port} (database: ${config.describeDatabase()}; outbox transport: ${config.describeTransport()})`,
    'Bootstrap',
  );
  return app;
}
