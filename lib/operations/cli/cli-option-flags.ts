import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { CliUsageError } from './cli-usage.error';
import { CliMessages } from './cli.messages';

/**
 * Where each option the CLI hands to the module (or to `debeziumConnectorConfig`) comes from on
 * the command line: a refusal names what the user typed, not an option they never wrote.
 */
const FLAG_OF_OPTION: Readonly<Record<string, string>> = {
  tableName: '--table',
  schema: '--schema',
  'ordering.onDeadLetter': '--on-dead-letter',
  delivery: '--delivery',
  partitioning: '--partition-by',
  'partitioning.interval': '--partition-by',
  'partitioning.premake': '--premake',
  'partitioning.retention': '--retention',
  'cleaner.deliveredRetentionMs': '--delivered-retention',
  'cleaner.deadRetentionMs': '--dead-retention',
  connector: '--connector',
  name: '--name',
  topicPrefix: '--topic-prefix',
  startWith: '--start-with',
  slotName: '--slot',
  publicationName: '--slot',
  schemaHistoryBootstrapServers: '--bootstrap-servers',
  serverId: '--server-id',
  'database.hostname': 'DATABASE_URL',
  'database.port': 'DATABASE_URL',
  'database.user': 'DATABASE_URL',
  'database.dbname': 'DATABASE_URL',
};

/**
 * `error` as a usage error under the flag the user typed, when it is an options error of an
 * option the CLI filled from one; null otherwise. The checks of the command line come first,
 * with their own words: this is the net under them.
 */
export function flagErrorOf(error: unknown): CliUsageError | null {
  if (!(error instanceof OutboxOptionsError)) return null;
  const flag = FLAG_OF_OPTION[error.option];
  if (flag === undefined) return null;
  const reason = error.message.replace(/^Invalid \S+ option "[^"]*": /, '');
  return new CliUsageError(CliMessages.flagRefused(flag, reason));
}
