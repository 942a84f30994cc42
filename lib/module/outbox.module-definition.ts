import { ConfigurableModuleBuilder } from '@nestjs/common';
import { OUTBOX_EXTRA_DEFAULTS as EXTRAS } from '../options/outbox-defaults';
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
    { isGlobal: EXTRAS.isGlobal.value, workers: EXTRAS.workers.value, name: EXTRAS.name.value },
    (definition, extras) => ({
      ...definition,
      global: extras.isGlobal,
    }),
  )
  .build();
