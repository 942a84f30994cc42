import 'reflect-metadata';
import { Logger } from '@nestjs/common';
import { bootstrap } from './bootstrap';
import { SampleConfigError } from './config/sample.config';

bootstrap().catch((error: unknown) => {
  const message = `Could not start the orders sample: ${error instanceof Error ? error.message : String(error)}`;
  // A bad variable is explained by its message; anything else gets its stack.
  if (error instanceof Error && !(error instanceof SampleConfigError))
    Logger.error(message, error.stack, 'Bootstrap');
  else Logger.error(message, 'Bootstrap');
  process.exitCode = 1;
});
