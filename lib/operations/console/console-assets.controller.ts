import { Get, Inject, Res } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { CONSOLE_CSS, CONSOLE_JS } from './console.assets';
import { ConsoleResponder } from './console-responder';

/**
 * The console's stylesheet and script, outside the access guard: they are the same for everyone
 * and hold nothing of the outbox, and a refused visitor's 401 page needs them to be readable.
 * Mounted at the console's path by `OutboxConsoleModule`, like the pages.
 */
export class OutboxConsoleAssetsController {
  private readonly respond: ConsoleResponder;

  constructor(@Inject(HttpAdapterHost) adapterHost: HttpAdapterHost) {
    this.respond = new ConsoleResponder(() => adapterHost.httpAdapter);
  }

  @Get('assets/console.css')
  css(@Res() res: unknown): void {
    this.respond.asset(res, 'text/css', CONSOLE_CSS);
  }

  @Get('assets/console.js')
  js(@Res() res: unknown): void {
    this.respond.asset(res, 'text/javascript', CONSOLE_JS);
  }
}
