import {
  Catch,
  HttpException,
  Inject,
  Logger,
  type ArgumentsHost,
  type ExceptionFilter,
} from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { describeError } from '../../internal/describe-error';
import { ConsoleInputError } from './console-input';
import { ConsoleResponder } from './console-responder';
import { ConsoleRuntime } from './console.runtime';
import { notice } from './views/layout.view';
import { signInPage } from './views/sign-in.view';

const isAdminInputError = (error: unknown): error is Error =>
  error instanceof Error && (error as { code?: unknown }).code === 'OUTBOX_ADMIN_INVALID_INPUT';

/**
 * Every failure of a console request as a page: bad input is a 400 with its reason, a refused
 * visitor a 401 (with the sign-in link when the app gave one), and anything else a 500 whose
 * details stay in the server's log, so no database error (and no URL in it) reaches the page.
 */
@Catch()
export class ConsoleExceptionFilter implements ExceptionFilter {
  private readonly logger = new Logger('OutboxConsole');
  private readonly responder: ConsoleResponder;

  constructor(
    @Inject(ConsoleRuntime) private readonly runtime: ConsoleRuntime,
    adapterHost: HttpAdapterHost,
  ) {
    this.responder = new ConsoleResponder(() => adapterHost.httpAdapter);
  }

  catch(exception: unknown, host: ArgumentsHost): void {
    const response = host.switchToHttp().getResponse<unknown>();
    const ctx = {
      base: this.runtime.path,
      readOnly: this.runtime.options.readOnly,
      csrf: '',
      refresh: null,
    };
    if (exception instanceof ConsoleInputError || isAdminInputError(exception)) {
      this.responder.page(response, 400, notice(ctx, 'Bad request', exception.message));
      return;
    }
    if (exception instanceof HttpException) {
      const status = exception.getStatus();
      this.responder.page(
        response,
        status,
        status === 401
          ? signInPage(ctx, this.runtime.options.loginUrl)
          : notice(ctx, 'Refused', exception.message),
      );
      return;
    }
    this.logger.error(`A console request failed: ${describeError(exception)}`);
    this.responder.page(
      response,
      500,
      notice(
        ctx,
        'Something failed',
        'The console could not answer: the reason is in the server log.',
      ),
    );
  }
}
