import type { LoggerService } from '@nestjs/common';

/** One line a Nest logger was given: its level, text, context and structured fields. */
export interface CapturedLine {
  readonly level: string;
  readonly context: string;
  readonly message: string;
  readonly fields: Record<string, unknown> | undefined;
}

/**
 * A Nest `LoggerService` that keeps every line instead of printing it, for the specs that assert
 * what an operator sees (or that keep an outage's errors out of the output).
 */
export class CapturingLogger implements LoggerService {
  readonly lines: CapturedLine[] = [];

  // Nest's Logger passes (message, ...params, context). A line with facts is one object, its
  // text under `msg` (the dispatcher's `LogLine`).
  private push(level: string, message: unknown, params: unknown[]): void {
    const last = params.at(-1);
    let fields: Record<string, unknown> | undefined;
    if (typeof message === 'object' && message !== null && 'msg' in message) {
      const { msg: _text, ...facts } = message as Record<string, unknown>;
      fields = facts;
    }
    this.lines.push({
      level,
      message: String(message),
      context: typeof last === 'string' ? last : '',
      fields,
    });
  }
  log(message: unknown, ...params: unknown[]): void {
    this.push('log', message, params);
  }
  warn(message: unknown, ...params: unknown[]): void {
    this.push('warn', message, params);
  }
  error(message: unknown, ...params: unknown[]): void {
    this.push('error', message, params);
  }
  fatal(message: unknown, ...params: unknown[]): void {
    this.push('fatal', message, params);
  }
  debug(message: unknown, ...params: unknown[]): void {
    this.push('debug', message, params);
  }
  verbose(message: unknown, ...params: unknown[]): void {
    this.push('verbose', message, params);
  }

  /** The lines of `context` (the dispatcher's by default) matching `pattern`, at `level`. */
  linesOf(pattern: RegExp, level?: string, context = 'OutboxDispatcher'): CapturedLine[] {
    return this.lines.filter(
      (l) =>
        l.context === context &&
        (level === undefined || l.level === level) &&
        pattern.test(l.message),
    );
  }
}
