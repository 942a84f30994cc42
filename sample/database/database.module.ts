import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { Global, Module, type OnApplicationShutdown } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { dataSourceOptions } from '../config/database.options';
import { SampleConfig } from '../config/sample.config';

/** Provides the initialised (and migrated) TypeORM DataSource; closes it last on shutdown. */
@Global()
@Module({
  providers: [
    {
      provide: DataSource,
      inject: [SampleConfig],
      useFactory: async (config: SampleConfig): Promise<DataSource> => {
        if (config.database.type === 'sqlite')
          mkdirSync(dirname(config.database.path), { recursive: true });
        return new DataSource(dataSourceOptions(config.database)).initialize();
      },
    },
  ],
  exports: [DataSource],
})
export class DatabaseModule implements OnApplicationShutdown {
  constructor(private readonly dataSource: DataSource) {}

  // The outbox dispatcher settles its last batch in beforeApplicationShutdown, before this runs.
  async onApplicationShutdown(): Promise<void> {
    if (this.dataSource.isInitialized) await this.dataSource.destroy();
  }
}
