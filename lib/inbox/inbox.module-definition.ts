import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { InboxModuleExtras, InboxModuleOptions } from './inbox.options';

export const {
  ConfigurableModuleClass: ConfigurableInboxModule,
  MODULE_OPTIONS_TOKEN: INBOX_MODULE_OPTIONS,
  OPTIONS_TYPE: INBOX_OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE: INBOX_ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<InboxModuleOptions>({ moduleName: 'Inbox' })
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createInboxOptions')
  .setExtras<Required<InboxModuleExtras>>({ isGlobal: true }, (definition, extras) => ({
    ...definition,
    global: extras.isGlobal,
  }))
  .build();
