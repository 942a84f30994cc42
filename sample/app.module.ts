import { Logger, Module, type BeforeApplicationShutdown, type DynamicModule } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { OutboxModule } from '../lib';
import { SampleConfigModule } from './config/sample-config.module';
import { SampleConfig } from './config/sample.config';
import { createPublisher } from './config/transport.options';
import { SampleConsoleModule } from './console/sample-console.module';
import { ConsumerModule } from './consumer/consumer.module';
import { DatabaseModule } from './database/database.module';
import { OrdersModule } from './orders/orders.module';
import { OutboxStatsController } from './outbox/outbox-stats.controller';

@Module({})
export class AppModule implements BeforeApplicationShutdown {
  private readonly logger = new Logger(AppModule.name);

  beforeApplicationShutdown(signal?: string): void {
    if (signal !== undefined) this.logger.log(`${signal} received: shutting down`);
  }

  static forRoot(config: SampleConfig): DynamicModule {
    return {
      module: AppModule,
      imports: [
        SampleConfigModule.forRoot(config),
        DatabaseModule,
        OutboxModule.forRootAsync({
          inject: [DataSource, SampleConfig],
          useFactory: (dataSource: DataSource, cfg: SampleConfig) => ({
            dataSource,
            schema: cfg.database.type === 'postgres' ? cfg.database.schema : undefined,
            publisher: createPublisher(cfg.transport),
          }),
        }),
        OrdersModule,
        ConsumerModule,
        SampleConsoleModule.forRoot(config),
      ],
      controllers: [OutboxStatsController],
    };
  }
}
