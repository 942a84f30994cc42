import { ConsoleLogger, Logger, Module, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { PassThrough } from 'node:stream';
import { LoggerModule, Logger as PinoLogger } from 'nestjs-pino';
import { WinstonModule } from 'nest-winston';
import * as winston from 'winston';
import { DispatcherLog } from '../../lib/dispatch/dispatcher-log';

/** The JSON records a stream was given, one per line. */
function recordsOf(stream: PassThrough): () => Record<string, unknown>[] {
  const chunks: string[] = [];
  stream.on('data', (chunk: Buffer) => chunks.push(chunk.toString('utf8')));
  return () =>
    chunks
      .join('')
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
}

const FACTS = { messageId: 'm-1', key: 'acct-9', topic: 'ledger', attempt: 2 };
const TEXT = 'Message m-1 failed attempt 2, retrying in 400 ms: Error: boom';

/** Logs one dispatcher line with facts through Nest's Logger, as the dispatcher does. */
function logThrough(app: { useLogger(logger: LoggerService): void }, logger: LoggerService): void {
  app.useLogger(logger);
  new DispatcherLog(new Logger('OutboxDispatcher'), 'default', 'ab12cd34').warn(TEXT, FACTS);
}

describe("the dispatcher's log fields through the loggers Nest apps use", () => {
  it('nestjs-pino: one record with the facts as fields and the text as msg', async () => {
    const stream = new PassThrough();
    const records = recordsOf(stream);
    @Module({ imports: [LoggerModule.forRoot({ pinoHttp: [{ level: 'info' }, stream] })] })
    class AppModule {}
    const app = await NestFactory.createApplicationContext(AppModule, {
      bufferLogs: true,
      logger: false,
    });
    logThrough(app, app.get(PinoLogger));
    await app.close();
    expect(records().filter((r) => r['context'] === 'OutboxDispatcher')).toEqual([
      expect.objectContaining({
        level: 40,
        msg: `${TEXT} (run ab12cd34)`,
        runId: 'ab12cd34',
        ...FACTS,
      }),
    ]);
  });

  it('nest-winston: the text as message, the facts as metadata', async () => {
    const stream = new PassThrough();
    const records = recordsOf(stream);
    const app = await NestFactory.createApplicationContext(class EmptyModule {}, {
      logger: false,
    });
    logThrough(
      app,
      WinstonModule.createLogger({
        transports: [new winston.transports.Stream({ stream, format: winston.format.json() })],
      }),
    );
    await app.close();
    expect(records()).toEqual([
      expect.objectContaining({
        level: 'warn',
        message: `${TEXT} (run ab12cd34)`,
        context: 'OutboxDispatcher',
        runId: 'ab12cd34',
        ...FACTS,
      }),
    ]);
  });

  it("Nest's ConsoleLogger: the text alone in text mode, text and facts in JSON mode", async () => {
    const printed: string[] = [];
    const capture = (chunk: string | Uint8Array): boolean => {
      printed.push(String(chunk));
      return true;
    };
    // Nest prints warnings to stdout (errors to stderr).
    const spies = [
      jest.spyOn(process.stdout, 'write').mockImplementation(capture),
      jest.spyOn(process.stderr, 'write').mockImplementation(capture),
    ];
    const app = await NestFactory.createApplicationContext(class EmptyModule {}, {
      logger: false,
    });
    try {
      logThrough(app, new ConsoleLogger({ colors: false }));
      logThrough(app, new ConsoleLogger({ json: true }));
    } finally {
      for (const spy of spies) spy.mockRestore();
      await app.close();
    }
    const [text, json] = printed;
    expect(text).toContain(`WARN [OutboxDispatcher] ${TEXT} (run ab12cd34)`);
    expect(text).not.toContain('Object');
    expect(JSON.parse(json ?? '')).toMatchObject({
      level: 'warn',
      context: 'OutboxDispatcher',
      message: { msg: `${TEXT} (run ab12cd34)`, runId: 'ab12cd34', ...FACTS },
    });
  });
});
