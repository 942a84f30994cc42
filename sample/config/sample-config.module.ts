import { Global, Module, type DynamicModule } from '@nestjs/common';
import { SampleConfig } from './sample.config';

/** Makes the {@link SampleConfig} the app was started with injectable everywhere. */
@Global()
@Module({})
export class SampleConfigModule {
  static forRoot(config: SampleConfig): DynamicModule {
    return {
      module: SampleConfigModule,
      providers: [{ provide: SampleConfig, useValue: config }],
      exports: [SampleConfig],
    };
  }
}
