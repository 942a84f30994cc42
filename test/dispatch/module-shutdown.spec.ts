import { Module, type INestApplicationContext, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { DataSource } from 'typeorm';
import { OutboxModule } from '../../lib';
import { RecordingPublisher } from '../../lib/testing';
import { testDatabase, uniqueTable } from '../support/databases';
import { expectNever, waitFor } from '../support/wait-for';

// Without app.enableShutdownHooks(), SIGTERM kills the process before the dispatcher can
// release what it claimed; the outbox says so at bootstrap when its dispatcher runs.

const postgres = testDatabase('postgres');

class CapturingLogger implements LoggerService {
  readonly warnings: string[] = [];
  log(): void {}
  error(): void {}
  warn(message: unknown): void {
    this.warnings.push(String(message));
  }
}

describe('the shutdown hooks warning', () => {
  let ds: DataSource;
  let table: string;
  let app: INestApplicationContext | undefined;

  beforeEach(async () => {
    table = uniqueTable('outbox_stop');
    ds = await postgres.open(table);
    // The check reads the process's SIGTERM listeners: none may be left over from elsewhere.
    expect(process.listenerCount('SIGTERM')).toBe(0);
  });

  afterEach(async () => {
    await app?.close();
    app = undefined;
    await postgres.close(ds, table);
  });

  async function boot(autoStart: boolean, hooks: boolean): Promise<CapturingLogger> {
    const logger = new CapturingLogger();
    @Module({
      imports: [
        OutboxModule.forRoot({
          dataSource: ds,
          tableName: table,
          publisher: new RecordingPublisher(),
          autoStart,
          dispatcher: { listen: false },
        }),
      ],
    })
    class AppModule {}
    // As a worker's main.ts does: the context is initialised before enableShutdownHooks().
    app = await NestFactory.createApplicationContext(AppModule, { logger });
    if (hooks) app.enableShutdownHooks();
    return logger;
  }

  const aboutHooks = (logger: CapturingLogger) => (): string | undefined =>
    logger.warnings.find((w) => w.includes('enableShutdownHooks'));

  it('warns when the dispatcher runs and nothing handles SIGTERM', async () => {
    const logger = await boot(true, false);
    const warning = await waitFor('the warning', aboutHooks(logger));
    expect(warning).toMatch(/SIGTERM/);
    expect(warning).toMatch(/leased .*30000 ms/);
  });

  it('stays quiet when the app enabled shutdown hooks', async () => {
    const logger = await boot(true, true);
    await expectNever('a shutdown hooks warning', aboutHooks(logger), 2_000);
  });

  it('stays quiet when the dispatcher does not start at bootstrap', async () => {
    const logger = await boot(false, false);
    await expectNever('a shutdown hooks warning', aboutHooks(logger), 2_000);
  });
});
