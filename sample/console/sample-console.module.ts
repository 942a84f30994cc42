import { Module, type DynamicModule } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { ensureOutboxConsoleAuditTable, OutboxConsoleModule } from '../../lib/operations/console';
import type { SampleConfig } from '../config/sample.config';
import { ConsoleLoginController } from './console-login.controller';
import { consoleTokenCheck } from './console-token';

/** The outbox console at /outbox behind OUTBOX_CONSOLE_TOKEN; nothing at all when it is unset. */
@Module({})
export class SampleConsoleModule {
  static forRoot(config: SampleConfig): DynamicModule {
    const token = config.consoleToken;
    if (token === undefined) return { module: SampleConsoleModule };
    return {
      module: SampleConsoleModule,
      imports: [
        OutboxConsoleModule.forRootAsync({
          path: '/outbox',
          inject: [DataSource],
          useFactory: async (dataSource: DataSource) => {
            // The sample creates its tables at startup; an app would use a migration
            // (outboxAuditTableDdl gives the statements).
            await ensureOutboxConsoleAuditTable(dataSource);
            return {
              authorize: consoleTokenCheck(token),
              loginUrl: '/outbox-login',
              auditTable: { dataSource },
            };
          },
        }),
      ],
      controllers: [ConsoleLoginController],
    };
  }
}
