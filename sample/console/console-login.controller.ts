import { Body, Controller, Get, Header, HttpCode, Post, Res } from '@nestjs/common';
import { SampleConfig } from '../config/sample.config';
import { CONSOLE_COOKIE, consoleTokenCheck, cookieValueOf } from './console-token';

/** What this controller uses of Express's response (the sample runs on @nestjs/platform-express). */
interface Response {
  status(code: number): Response;
  type(type: string): Response;
  send(body: string): void;
  cookie(name: string, value: string, options: Record<string, unknown>): void;
  redirect(status: number, url: string): void;
}

const form = (problem: string): string => `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in · Outbox console</title></head>
<body><h1>Outbox console</h1>
${problem === '' ? '' : `<p role="alert">${problem}</p>`}
<form method="post" action="/outbox-login">
<label>Console token <input type="password" name="token" autocomplete="current-password" required></label>
<button type="submit">Sign in</button>
</form></body></html>`;

/**
 * A person's way into the sample's console: the token typed once, then a same-site, HTTP-only
 * cookie scoped to /outbox. (A real app would use its own sign-in and pass a guard instead.)
 */
@Controller('outbox-login')
export class ConsoleLoginController {
  private readonly check: (request: { headers: { authorization: string } }) => boolean;

  constructor(private readonly config: SampleConfig) {
    this.check = consoleTokenCheck(config.consoleToken ?? '');
  }

  @Get()
  @Header('Content-Type', 'text/html; charset=utf-8')
  @Header('Cache-Control', 'no-store')
  page(): string {
    return form('');
  }

  @Post()
  @HttpCode(303)
  signIn(@Body() body: { token?: unknown }, @Res() res: Response): void {
    const token = typeof body?.token === 'string' ? body.token : '';
    if (!this.check({ headers: { authorization: `Bearer ${token}` } })) {
      res.status(401).type('html').send(form('That is not the console token.'));
      return;
    }
    res.cookie(CONSOLE_COOKIE, cookieValueOf(token), {
      httpOnly: true,
      sameSite: 'strict',
      path: '/outbox',
      // Over plain http on localhost a Secure cookie would not be sent back.
      secure: false,
      maxAge: 8 * 3_600_000,
    });
    res.redirect(303, '/outbox');
  }
}
