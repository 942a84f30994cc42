import {
  Inject,
  Injectable,
  UnauthorizedException,
  type CanActivate,
  type ExecutionContext,
} from '@nestjs/common';
import { ConsoleRuntime } from './console.runtime';

/** Lets a request into the console only when the app's guard or `authorize` callback says so. */
@Injectable()
export class ConsoleAccessGuard implements CanActivate {
  constructor(@Inject(ConsoleRuntime) private readonly runtime: ConsoleRuntime) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    if (await this.runtime.allows(context)) return true;
    // 401 rather than Nest's 403 for a guard's false: the visitor may sign in and come back.
    throw new UnauthorizedException('Sign in to open the outbox console.');
  }
}
