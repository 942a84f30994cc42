import { ConfigurableModuleBuilder } from '@nestjs/common';
import { DEFAULT_OUTBOX_NAME } from '../outbox.constants';
import type { OutboxModuleExtras, OutboxModuleOptions } from '../options/outbox.options';

export const {
  ConfigurableModuleClass: ConfigurableOutboxModule,
  MODULE_OPTIONS_TOKEN: OUTBOX_MODULE_OPTIONS,
  OPTIONS_TYPE: OUTBOX_OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE: OUTBOX_ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<OutboxModuleOptions>({ moduleName: 'Outbox' })
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createOutboxOptions')
  .setExtras<Required<OutboxModuleExtras>>(
    { isGlobal: true, workers: true, name: DEFAULT_OUTBOX_NAME },
    (definition, extras) => ({
      ...definition,
      global: extras.isGlobal,
    }),
  )
  .build();
