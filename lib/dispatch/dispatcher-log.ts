import type { Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { inspect } from 'node:util';

/**
 * A batch's short id on its log lines: the last 8 hex digits of its claim's (or lease's) token,
 * so that an operator can follow one batch from claim to settle, and find its rows by token. Not
 * the first: an owner token's first group is its owner's key, the same for all its batches.
 */
export function batchIdOf(token: string): string {
  return token.slice(-8);
}

/**
 * A line's error as pino and most indexers expect it (`err.type`, `err.message`): plain data,
 * its message redacted as the text is, never the Error itself (a serialiser of Errors would
 * write its unredacted message and stack).
 */
export interface LogErrorField {
  readonly type: string;
  readonly message: string;
}

type LogFieldValue = string | number | LogErrorField;

/** Facts of a log line for a log indexer, passed to the logger service as its last object. */
export type LogFields = Readonly<Record<string, LogFieldValue | undefined>>;

/**
 * A line with its facts, given to the logger as its message. Loggers read it the way each reads
 * an object: Nest's `ConsoleLogger` prints its text (`inspect`, or `toString` before Nest 11) and
 * with `json: true` the whole object; nestjs-pino merges its own properties into the record, the
 * text under pino's `msg`; nest-winston takes its `message` (not enumerable, so that pino's record
 * does not carry the text twice) and the rest as metadata. A second argument after the text would
 * reach none of them but Nest's own logger (nestjs-pino drops it).
 */
export class LogLine {
  declare readonly message: string;
  readonly msg: string;

  constructor(text: string, fields: Readonly<Record<string, LogFieldValue>>) {
    Object.assign(this, fields);
    this.msg = text;
    Object.defineProperty(this, 'message', { value: text, enumerable: false });
  }

  toString(): string {
    return this.msg;
  }

  [inspect.custom](): string {
    return this.msg;
  }
}

/**
 * The dispatcher's lines, each naming its run (and, for a line about one batch, the batch: a
 * `batch` field, see `batchIdOf`) (one id per process start, and the instance when
 * not the default one) in the text and, where a line carries fields, among them: lines of
 * several dispatchers in one log are told apart, and an indexer finds a run's lines by field.
 */
export class DispatcherLog {
  readonly runId: string;
  /** `run <id>`, or `outbox '<name>', run <id>` for a named instance. */
  readonly label: string;
  private readonly outbox: string | undefined;

  constructor(
    private readonly logger: Logger,
    name: string,
    runId = randomBytes(4).toString('hex'),
  ) {
    this.runId = runId;
    this.outbox = name === 'default' ? undefined : name;
    this.label = `${this.outbox === undefined ? '' : `outbox '${this.outbox}', `}run ${runId}`;
  }

  log(text: string, fields?: LogFields): void {
    this.write('log', text, fields);
  }

  warn(text: string, fields?: LogFields): void {
    this.write('warn', text, fields);
  }

  error(text: string, fields?: LogFields): void {
    this.write('error', text, fields);
  }

  verbose(text: string, fields?: LogFields): void {
    this.write('verbose', text, fields);
  }

  debug(text: string, fields?: LogFields): void {
    this.write('debug', text, fields);
  }

  private write(
    level: 'log' | 'warn' | 'error' | 'verbose' | 'debug',
    text: string,
    fields: LogFields | undefined,
  ): void {
    // Lifecycle lines place the label in their sentence; the others end with it, after the
    // batch a line is about, if any.
    const batch = fields?.['batch'];
    const line = text.includes(this.label)
      ? text
      : `${text} (${typeof batch === 'string' ? `batch ${batch}, ` : ''}${this.label})`;
    if (fields === undefined) this.logger[level](line);
    else {
      // Without the facts a message does not have (no key): a printed `key: undefined` is noise.
      const given = Object.entries({ runId: this.runId, outbox: this.outbox, ...fields }).filter(
        ([, value]) => value !== undefined,
      );
      this.logger[level](
        new LogLine(line, Object.fromEntries(given) as Record<string, LogFieldValue>),
      );
    }
  }
}
