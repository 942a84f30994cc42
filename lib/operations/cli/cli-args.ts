import { OUTBOX_STEP_OPTIONS, type OutboxStepOption } from '../../store/schema/schema-steps';
import { parseArgs } from 'node:util';
import type { OutboxDeadLetterFilter } from '../../module/admin/outbox-admin.interfaces';
import type { OutboxRedriveFilter } from '../../module/admin/outbox-redrive.interfaces';
import { suggestOption } from '../../internal/did-you-mean';
import { MAX_TABLE_NAME_LENGTH } from '../../internal/sql-identifier';
import { redriveConfirmationCount } from '../../module/admin/redrive-confirmation';
import {
  DEBEZIUM_CONNECTORS,
  isDebeziumConnector,
  type DebeziumConnectorKind,
} from '../../store/schema/debezium-connector-config';
import { CliUsageError } from './cli-usage.error';

export const USAGE = `Usage: outbox <command> [options]

Commands:
  schema print [--dialect postgres|mysql|sqlite] [--partition-by day|week|month] [--archive]
         [--audit [--audit-table NAME]]            print the outbox table's DDL (and its
                                                   archive's, for cleaner.archive, and the
                                                   audit table's, for re-drives)
  schema migrate [--with OPTIONS [--online]] [--partition-by day|week|month] [--archive]
         [--binary-ids] [--log-tailing]
         [--audit [--audit-table NAME]]            create the outbox table if it is missing
                                                   (time-partitioned with --partition-by), or
                                                   bring an older one up to date in place
                                                   (and create the archive table, and the
                                                   audit table re-drives are recorded in);
                                                   with --binary-ids (MySQL/MariaDB, app
                                                   stopped), convert CHAR(36) message ids to
                                                   BINARY(16)
  schema status                                    which parts of the schema the table has,
                                                   and what migrate would change
  dlq list [filters] [--limit N] [--after CURSOR]  list dead letters, oldest first
  dlq show <messageId>                             show one message in full (any status)
  dlq retry <messageId…> | --all | filters         put dead letters back in the queue
  dlq purge <messageId…> | filters | --yes         delete dead letters (--yes when
                                                   only --older-than or nothing narrows it)
  stats [--watch [--interval 2s]]                  count messages by status and topic (again
                                                   every interval with --watch, until Ctrl-C)
  why <messageId> [--on-dead-letter MODE]          why a message is not out yet
  blocked [--limit N] [--after CURSOR]             keys held up by a dead or retrying head
  leases [--longer-than 5m]                        leases that expired (or are held that long)
  cleanup --once [--delivered-retention 1d] [--dead-retention 7d --yes] [--archive]
                                                   delete delivered (and dead) rows past
                                                   retention, or move them to the archive
  cdc debezium --connector postgres|mysql|mariadb [--name N] [--topic-prefix P]
         [--start-with new|undelivered] [--slot NAME] [--bootstrap-servers HOST:PORT]
         [--server-id N]                           print the Kafka Connect config of a Debezium
                                                   connector that delivers this table (host,
                                                   port, user and database from DATABASE_URL;
                                                   the password as a config-provider reference)
  log setup [--slot NAME] [--publication NAME]     log tailing: create the publication of
                                                   the table's inserts and the replication
                                                   slot (PostgreSQL; waits up to 60 s for
                                                   open write transactions) or the binlog
                                                   position table (MySQL/MariaDB);
                                                   also schema migrate --log-tailing
  log status [--slot NAME] [--publication NAME]    the slot (PostgreSQL) or stored binlog
                                                   position (MySQL): read or not, the log kept
  log drop --yes [--slot NAME] [--publication NAME]
                                                   drop the slot and publication, or the
                                                   position table (when log tailing is off)
  redrive [redrive filters] --reason TEXT [--to TOPIC] [--rate N] [--actor NAME]
         [--max N] [--archive] [--audit-table NAME] --dry-run | --yes [--expect TOKEN]
                                                   send delivered messages again as new
                                                   messages (headers x-outbox-redrive-of and
                                                   x-outbox-redrive-id), recorded in the audit
                                                   table; --dry-run prints the count, the
                                                   first 20 and their confirmation TOKEN;
                                                   --yes --expect TOKEN sends exactly those
                                                   (refused if they changed), --yes alone
                                                   what it prints as it runs
  redrives [--limit N] [--audit-table NAME]        past re-drives from the audit table, newest
                                                   first (who, why, filter, count)
  erase <subject> --reason TEXT --yes [--actor NAME] [--audit-table NAME]
                                                   erase a subject's personal data for good:
                                                   destroy its data key, enqueue an erasure
                                                   notice on each key its messages used,
                                                   recorded in the audit table (the erasure
                                                   option, docs/erasure.md)
  partitions status [--retention 7d]               each time partition of a partitioned table:
                                                   range, rows by status, size, droppable or
                                                   why not
  partitions maintain [--dry-run] [--retention 7d] [--premake 3] [--dead-retention 7d --yes]
                                                   create the partitions ahead and drop those
                                                   whose rows are all final (as the app's
                                                   maintainer; --dry-run only says what it would)
  delivery-partitions status                       dispatcher.claims 'partitions' (PostgreSQL):
                                                   each dispatcher process, its heartbeat, state
                                                   and share of the 256 delivery partitions of
                                                   the key space, and the latest moves; or why
                                                   they are not in use

Filters (dead letters matching all of them):
  --topic T  --key K  --type T  --error TEXT (in last_error, any case)  --older-than 1h (enqueued)
  --tenant T (the message's tenant_id, docs/tenants.md; also for stats)

Redrive filters (delivered messages matching all of them; --archive: also <table>_archive):
  --topic T  --key K  --type T  --since WHEN  --until WHEN (enqueued)
  --delivered-since WHEN  --delivered-until WHEN     WHEN: an ISO time or a duration ago (2h)

Options:
  --table NAME              outbox table (default: outbox)
  --schema NAME             PostgreSQL schema or MySQL database (default: the connection's)
  --on-dead-letter MODE     block (default) or skip: as the app's ordering.onDeadLetter
  --delivery MODE           poll (default) or external: as the app's delivery option (an app
                            that tails the log: poll, or log); with external (Debezium),
                            stats and why say so, and cleanup deletes rows by age whatever
                            their status
  --with OPTIONS            schema commands: the steps of these app options too, a comma list
                            of sequence, tenants, partitions, claimCheck, erasure (a table
                            without one serves every app that does not set it; default: none)
  --online                  schema migrate, PostgreSQL: make the steps that would rewrite the
                            table (tenants, partitions) without blocking writes (a column filled
                            by a trigger and in batches, CREATE INDEX CONCURRENTLY)
  --retention, --premake, --dead-retention
                            for partitions: as the app's partitioning.retention (default 7d),
                            partitioning.premake (default 3) and cleaner.deadRetentionMs
                            (default: dead letters are kept)
  --json                    print one JSON document on stdout
  -h, --help                show this help

The database comes from DATABASE_URL: postgres://user:password@host:5432/db,
mysql://… or mariadb://…, sqlite:path/to/file.db (or file:…), or a SQLite file path.
Connects through the database's driver (pg, mysql2 or better-sqlite3), not TypeORM.
Durations: 500ms, 30s, 5m, 1h, 7d.
Exit codes: 0 done; 1 failed, or a message id not found (why, dlq show, dlq retry and
dlq purge of ids that are not dead letters: the rest is done); 2 bad usage.
`;

const OPTIONS = {
  table: { type: 'string' },
  schema: { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  dialect: { type: 'string' },
  'on-dead-letter': { type: 'string' },
  topic: { type: 'string' },
  key: { type: 'string' },
  type: { type: 'string' },
  error: { type: 'string' },
  'older-than': { type: 'string' },
  tenant: { type: 'string' },
  limit: { type: 'string' },
  after: { type: 'string' },
  all: { type: 'boolean' },
  yes: { type: 'boolean' },
  once: { type: 'boolean' },
  'delivered-retention': { type: 'string' },
  'dead-retention': { type: 'string' },
  'longer-than': { type: 'string' },
  watch: { type: 'boolean' },
  interval: { type: 'string' },
  archive: { type: 'boolean' },
  'partition-by': { type: 'string' },
  premake: { type: 'string' },
  retention: { type: 'string' },
  'dry-run': { type: 'boolean' },
  'binary-ids': { type: 'boolean' },
  delivery: { type: 'string' },
  connector: { type: 'string' },
  name: { type: 'string' },
  'topic-prefix': { type: 'string' },
  'start-with': { type: 'string' },
  slot: { type: 'string' },
  'bootstrap-servers': { type: 'string' },
  'server-id': { type: 'string' },
  'log-tailing': { type: 'boolean' },
  publication: { type: 'string' },
  since: { type: 'string' },
  until: { type: 'string' },
  'delivered-since': { type: 'string' },
  'delivered-until': { type: 'string' },
  to: { type: 'string' },
  rate: { type: 'string' },
  reason: { type: 'string' },
  actor: { type: 'string' },
  expect: { type: 'string' },
  max: { type: 'string' },
  'audit-table': { type: 'string' },
  audit: { type: 'boolean' },
  with: { type: 'string' },
  online: { type: 'boolean' },
} as const;

type OptionName = keyof typeof OPTIONS;

const COMMON: readonly OptionName[] = ['table', 'schema', 'json', 'help'];
const FILTERS: readonly OptionName[] = ['topic', 'key', 'type', 'error', 'older-than', 'tenant'];
const PAGE: readonly OptionName[] = ['limit', 'after'];

/** The commands, with the options each accepts besides the common ones. */
const COMMANDS = {
  'schema print': ['dialect', 'archive', 'partition-by', 'premake', 'audit', 'audit-table', 'with'],
  'schema migrate': [
    'with',
    'online',
    'archive',
    'partition-by',
    'premake',
    'binary-ids',
    'log-tailing',
    'publication',
    'audit',
    'audit-table',
  ],
  'schema status': ['with'],
  'dlq list': [...FILTERS, ...PAGE],
  'dlq show': [],
  'dlq retry': [...FILTERS, 'all', 'on-dead-letter'],
  'dlq purge': [...FILTERS, 'all', 'yes', 'on-dead-letter'],
  stats: ['watch', 'interval', 'delivery', 'tenant'],
  why: ['delivery', 'on-dead-letter'],
  blocked: [...PAGE, 'on-dead-letter'],
  leases: [...PAGE, 'longer-than'],
  cleanup: [
    'once',
    'delivered-retention',
    'dead-retention',
    'yes',
    'on-dead-letter',
    'archive',
    'delivery',
  ],
  'cdc debezium': [
    'connector',
    'name',
    'topic-prefix',
    'start-with',
    'slot',
    'bootstrap-servers',
    'server-id',
  ],
  'partitions status': ['retention', 'dead-retention', 'premake'],
  'partitions maintain': [
    'retention',
    'dead-retention',
    'yes',
    'premake',
    'dry-run',
    'on-dead-letter',
  ],
  redrive: [
    'topic',
    'key',
    'type',
    'since',
    'until',
    'delivered-since',
    'delivered-until',
    'to',
    'rate',
    'reason',
    'actor',
    'expect',
    'max',
    'archive',
    'audit-table',
    'dry-run',
    'yes',
    'on-dead-letter',
  ],
  redrives: ['limit', 'audit-table'],
  erase: ['reason', 'actor', 'audit-table', 'yes'],
  'delivery-partitions status': [],
  'log setup': ['slot', 'publication'],
  'log status': ['slot', 'publication'],
  'log drop': ['slot', 'publication', 'yes'],
} satisfies Record<string, readonly OptionName[]>;

export type CliCommand = keyof typeof COMMANDS;

/** A parsed command line. */
export interface CliArgs {
  readonly command: CliCommand | 'help';
  /** Positional arguments after the command (message ids). */
  readonly args: readonly string[];
  readonly table: string;
  readonly schema: string | null;
  readonly json: boolean;
  readonly dialect: string | undefined;
  readonly onDeadLetter: 'block' | 'skip';
  readonly filter: OutboxDeadLetterFilter;
  /** Whether any filter option was given. */
  readonly filtered: boolean;
  readonly limit: number | undefined;
  readonly after: string | undefined;
  readonly all: boolean;
  readonly yes: boolean;
  readonly once: boolean;
  readonly deliveredRetentionMs: number;
  readonly deadRetentionMs: number | null;
  readonly longerThanMs: number | undefined;
  readonly watch: boolean;
  /** `stats --watch` redraw interval. */
  readonly intervalMs: number;
  /** schema print/migrate: the archive table too; cleanup: move rows there. */
  readonly archive: boolean;
  /** schema print/migrate: the audit table too (`--audit-table`, else the default name). */
  readonly audit: boolean;
  /** `--partition-by`: make the table partitioned by this interval. */
  readonly partitionBy: 'day' | 'week' | 'month' | undefined;
  /** `--premake`, as `partitioning.premake`. */
  readonly premake: number;
  /** `--retention`, as `partitioning.retention`. */
  readonly retentionMs: number;
  readonly dryRun: boolean;
  /** schema migrate: convert CHAR(36) message ids to BINARY(16) (MySQL/MariaDB). */
  readonly binaryIds: boolean;
  /** `--delivery`, as the app's `delivery` (`poll` and log tailing: a dispatcher delivers). */
  readonly delivery: 'dispatcher' | 'external';
  /** schema commands: `--with`, the options whose schema steps the table gets too. */
  readonly withSteps: readonly OutboxStepOption[];
  /** schema migrate: `--online`, steps that would block writes made without blocking them. */
  readonly online: boolean;
  /** `cdc debezium`: the connector and its names. */
  readonly cdc: CliCdcArgs;
  /** schema migrate: also the publication log tailing reads (PostgreSQL). */
  readonly logTailing: boolean;
  /** log commands: the replication slot, else the table's default name. */
  readonly slot: string | undefined;
  /** log commands: the publication, else the table's default name. */
  readonly publication: string | undefined;
  /** `outbox redrive`. */
  readonly redrive: CliRedriveArgs;
}

/** The options of `outbox redrive`. */
export interface CliRedriveArgs {
  readonly filter: OutboxRedriveFilter;
  readonly to: string | undefined;
  readonly rate: number | undefined;
  readonly reason: string | undefined;
  /** `--actor`; the CLI takes the OS user when absent. */
  readonly actor: string | undefined;
  /** `--expect`: the confirmation a dry run printed. */
  readonly expect: string | undefined;
  readonly max: number | undefined;
  /** `--audit-table` (redrive, redrives, schema print/migrate --audit). */
  readonly auditTable: string | undefined;
}

/** `--since 2026-11-27T10:00:00Z`, or `--since 2h` (that long ago). */
function instantOf(text: string, option: string, now: number): Date {
  if (/^\d+(?:\.\d+)?(ms|s|m|h|d|w)$/.test(text.trim())) {
    return new Date(now - parseDuration(text, option));
  }
  const at = /^\d{4}-\d{2}-\d{2}/.test(text) ? new Date(text) : new Date(Number.NaN);
  if (Number.isNaN(at.getTime())) {
    throw new CliUsageError(
      `--${option} ${JSON.stringify(text)} is not a time: use an ISO time (2026-11-27T10:00:00Z) or a duration ago (2h, 7d).`,
    );
  }
  return at;
}

function wholeNumber(text: string | undefined, option: string, min: number, max: number) {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!/^\d+$/.test(text) || n < min || n > max) {
    throw new CliUsageError(`--${option} must be a whole number from ${min} to ${max}.`);
  }
  return n;
}

function confirmationOf(text: string | undefined): string | undefined {
  if (text === undefined) return undefined;
  if (redriveConfirmationCount(text) === undefined) {
    throw new CliUsageError(
      `--expect takes the confirmation a dry run printed (such as 2-9f3c0a…), not ${JSON.stringify(text)}: run the same command with --dry-run to get it.`,
    );
  }
  return text;
}

function redriveArgs(values: {
  topic?: string;
  key?: string;
  type?: string;
  since?: string;
  until?: string;
  'delivered-since'?: string;
  'delivered-until'?: string;
  to?: string;
  rate?: string;
  reason?: string;
  actor?: string;
  expect?: string;
  max?: string;
  'audit-table'?: string;
}): CliRedriveArgs {
  const now = Date.now();
  const filter: { -readonly [K in keyof OutboxRedriveFilter]: OutboxRedriveFilter[K] } = {};
  if (values.topic !== undefined) filter.topic = values.topic;
  if (values.key !== undefined) filter.key = values.key;
  if (values.type !== undefined) filter.type = values.type;
  if (values.since !== undefined) filter.createdAfter = instantOf(values.since, 'since', now);
  if (values.until !== undefined) filter.createdBefore = instantOf(values.until, 'until', now);
  const ds = values['delivered-since'];
  const du = values['delivered-until'];
  if (ds !== undefined) filter.deliveredAfter = instantOf(ds, 'delivered-since', now);
  if (du !== undefined) filter.deliveredBefore = instantOf(du, 'delivered-until', now);
  let rate: number | undefined;
  if (values.rate !== undefined) {
    rate = Number(values.rate);
    if (!/^\d+(?:\.\d+)?$/.test(values.rate) || !(rate > 0) || rate > 1_000_000) {
      throw new CliUsageError('--rate must be a number of messages per second above 0.');
    }
  }
  if (values.to === '') throw new CliUsageError('--to needs a topic.');
  return {
    filter,
    to: values.to,
    rate,
    reason: values.reason,
    actor: values.actor,
    expect: confirmationOf(values.expect),
    max: wholeNumber(values.max, 'max', 1, 1_000_000),
    auditTable:
      values['audit-table'] === undefined
        ? undefined
        : identifier(values['audit-table'], 'audit-table', MAX_TABLE_NAME_LENGTH),
  };
}

/** The options of `outbox cdc debezium`. */
export interface CliCdcArgs {
  readonly connector: DebeziumConnectorKind | undefined;
  readonly name: string | undefined;
  readonly topicPrefix: string | undefined;
  readonly startWith: 'new' | 'undelivered';
  readonly slot: string | undefined;
  readonly bootstrapServers: string | undefined;
  readonly serverId: number | undefined;
}

/** MySQL's server ids are 32-bit. */
const MAX_SERVER_ID = 4_294_967_295;
/** Kafka Connect connector names and Debezium topic prefixes, as the connector config takes them. */
const KAFKA_NAME = /^[A-Za-z0-9_.-]{1,200}$/;

function cdcArgs(values: {
  connector?: string;
  name?: string;
  'topic-prefix'?: string;
  'start-with'?: string;
  slot?: string;
  'bootstrap-servers'?: string;
  'server-id'?: string;
}): CliCdcArgs {
  const connector = values.connector;
  if (connector !== undefined && !isDebeziumConnector(connector)) {
    throw new CliUsageError(
      `--connector must be ${Object.keys(DEBEZIUM_CONNECTORS)
        .join(', ')
        .replace(/, ([^,]*)$/, ' or $1')}.`,
    );
  }
  const startWith = values['start-with'] ?? 'new';
  if (startWith !== 'new' && startWith !== 'undelivered') {
    throw new CliUsageError(`--start-with must be new or undelivered.`);
  }
  const serverId = values['server-id'];
  if (
    serverId !== undefined &&
    (!/^[1-9]\d{0,9}$/.test(serverId) || Number(serverId) > MAX_SERVER_ID)
  ) {
    throw new CliUsageError(`--server-id must be a whole number from 1 to ${MAX_SERVER_ID}.`);
  }
  // The connector's own rules, checked here so that the error names the flag typed.
  for (const [flag, what] of [
    ['name', 'a connector name'],
    ['topic-prefix', 'a Kafka topic prefix'],
  ] as const) {
    const value = values[flag];
    if (value !== undefined && !KAFKA_NAME.test(value)) {
      throw new CliUsageError(
        `--${flag} ${JSON.stringify(value)} is not ${what}: use 1 to 200 letters, digits, '.', '_' or '-'.`,
      );
    }
  }
  const bootstrapServers = values['bootstrap-servers']?.trim();
  if (bootstrapServers === '') {
    throw new CliUsageError('--bootstrap-servers needs the Kafka brokers, e.g. kafka:9092.');
  }
  return {
    connector,
    name: values.name,
    topicPrefix: values['topic-prefix'],
    startWith,
    slot: values.slot,
    bootstrapServers,
    serverId: serverId === undefined ? undefined : Number(serverId),
  };
}

const UNITS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
};

/** `90s`, `5m`, `1h`, `7d`, `1.5h`; `0` alone. */
export function parseDuration(text: string, option: string): number {
  if (text === '0') return 0;
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)$/.exec(text.trim());
  if (match === null) {
    throw new CliUsageError(
      `--${option} ${JSON.stringify(text)} is not a duration: use a number and a unit, e.g. 30s, 5m, 1h, 7d.`,
    );
  }
  return Math.round(Number(match[1]) * (UNITS[match[2] as string] as number));
}

function identifier(value: string, option: string, max: number): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(value) || value.length > max) {
    throw new CliUsageError(
      `--${option} ${JSON.stringify(value)} is not a safe SQL identifier: use 1 to ${max} letters, digits or underscores, starting with a letter or underscore.`,
    );
  }
  return value;
}

function slotName(value: string): string {
  if (!/^[a-z0-9_]{1,63}$/.test(value)) {
    throw new CliUsageError(
      `--slot ${JSON.stringify(value)} is not a replication slot name: use 1 to 63 lower-case letters, digits or underscores.`,
    );
  }
  return value;
}

function commandOf(positionals: readonly string[]): { command: CliCommand; rest: string[] } {
  const [first, second] = positionals;
  if (first === undefined) throw new CliUsageError('No command given.');
  const two = `${first} ${second ?? ''}`;
  if (Object.hasOwn(COMMANDS, two)) {
    return { command: two as CliCommand, rest: positionals.slice(2) };
  }
  if (Object.hasOwn(COMMANDS, first) && !first.includes(' ')) {
    return { command: first as CliCommand, rest: positionals.slice(1) };
  }
  if (
    first === 'schema' ||
    first === 'dlq' ||
    first === 'partitions' ||
    first === 'delivery-partitions' ||
    first === 'cdc' ||
    first === 'log'
  ) {
    const subs = Object.keys(COMMANDS)
      .filter((c) => c.startsWith(`${first} `))
      .map((c) => c.slice(first.length + 1));
    throw new CliUsageError(
      second === undefined
        ? `"outbox ${first}" needs a subcommand: ${subs.join(', ')}.`
        : `Unknown command "outbox ${first} ${second}": use ${subs.join(', ')}.`,
    );
  }
  // "outbox status" is a natural guess: name the commands it could have meant.
  const near = Object.keys(COMMANDS).filter((c) => c.split(' ').includes(first));
  throw new CliUsageError(
    `Unknown command "${first}".${near.length === 0 ? '' : ` Did you mean ${near.map((c) => `"outbox ${c}"`).join(', ')}?`} "outbox --help" lists every command.`,
  );
}

/** Parses the command line; throws `CliUsageError` for anything it cannot run. */
export function parseCliArgs(argv: readonly string[]): CliArgs {
  let parsed: ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>>;
  try {
    parsed = parseArgs({ args: [...argv], options: OPTIONS, allowPositionals: true, strict: true });
  } catch (error) {
    throw new CliUsageError(usageProblem(argv, error));
  }
  const { values, positionals } = parsed;
  if (values.help === true || positionals[0] === 'help' || positionals.length === 0) {
    if (values.help !== true && positionals[0] !== 'help') {
      throw new CliUsageError('No command given.');
    }
    return helpArgs();
  }
  const { command, rest } = commandOf(positionals);
  const allowed = new Set<OptionName>([...COMMON, ...(COMMANDS[command] as OptionName[])]);
  for (const name of Object.keys(values) as OptionName[]) {
    if (!allowed.has(name)) {
      throw new CliUsageError(`--${name} does not apply to "outbox ${command}".`);
    }
  }
  if (
    values['audit-table'] !== undefined &&
    command.startsWith('schema ') &&
    values.audit !== true
  ) {
    throw new CliUsageError(`--audit-table goes with --audit on "outbox ${command}".`);
  }
  const takesIds =
    command === 'dlq show' ||
    command === 'dlq retry' ||
    command === 'dlq purge' ||
    command === 'why' ||
    command === 'erase';
  if (!takesIds && rest.length > 0) {
    throw new CliUsageError(`Unexpected argument "${rest[0] as string}" for "outbox ${command}".`);
  }

  const filter: { -readonly [K in keyof OutboxDeadLetterFilter]: OutboxDeadLetterFilter[K] } = {};
  if (values.topic !== undefined) filter.topic = values.topic;
  if (values.key !== undefined) filter.key = values.key;
  if (values.type !== undefined) filter.type = values.type;
  if (values.error !== undefined) filter.errorContains = values.error;
  if (values.tenant !== undefined) filter.tenant = values.tenant;
  if (values['older-than'] !== undefined) {
    filter.olderThanMs = parseDuration(values['older-than'], 'older-than');
  }
  for (const [name, value] of Object.entries(filter)) {
    if (value === '') throw new CliUsageError(`--${name} needs a non-empty value.`);
  }

  let limit: number | undefined;
  if (values.limit !== undefined) {
    limit = Number(values.limit);
    if (!/^\d+$/.test(values.limit) || limit < 1 || limit > 1_000) {
      throw new CliUsageError(`--limit must be a whole number from 1 to 1000.`);
    }
  }
  if (values.after !== undefined && !/^\d{1,19}$/.test(values.after)) {
    throw new CliUsageError(`--after takes the cursor a previous page printed (a row id).`);
  }
  const onDeadLetter = values['on-dead-letter'] ?? 'block';
  if (onDeadLetter !== 'block' && onDeadLetter !== 'skip') {
    throw new CliUsageError(`--on-dead-letter must be block or skip.`);
  }
  const dead = values['dead-retention'];
  const delivery = deliveryOf(values.delivery);
  return {
    command,
    args: rest,
    table: identifier(values.table ?? 'outbox', 'table', MAX_TABLE_NAME_LENGTH),
    schema: values.schema === undefined ? null : identifier(values.schema, 'schema', 63),
    json: values.json === true,
    dialect: values.dialect,
    onDeadLetter,
    filter,
    filtered: Object.keys(filter).length > 0,
    limit,
    after: values.after,
    all: values.all === true,
    yes: values.yes === true,
    once: values.once === true,
    deliveredRetentionMs: parseDuration(
      values['delivered-retention'] ?? '1d',
      'delivered-retention',
    ),
    deadRetentionMs: dead === undefined ? null : parseDuration(dead, 'dead-retention'),
    longerThanMs:
      values['longer-than'] === undefined
        ? undefined
        : parseDuration(values['longer-than'], 'longer-than'),
    watch: values.watch === true,
    intervalMs: watchInterval(values.interval, values.watch === true),
    archive: values.archive === true,
    audit: values.audit === true,
    binaryIds: values['binary-ids'] === true,
    logTailing: values['log-tailing'] === true,
    slot: values.slot === undefined ? undefined : slotName(values.slot),
    publication:
      values.publication === undefined
        ? undefined
        : identifier(values.publication, 'publication', 63),
    partitionBy: partitionInterval(values['partition-by']),
    premake: premakeOf(values.premake),
    retentionMs: retentionOf(values.retention),
    dryRun: values['dry-run'] === true,
    delivery,
    withSteps: stepOptionsOf(values.with),
    online: values.online === true,
    cdc: cdcArgs(values),
    redrive: redriveArgs(values),
  };
}

/**
 * `--delivery`, as the app's `delivery` is written: `poll` (the default) and a log-tailing app
 * (`log`) have a dispatcher deliver; `external`, Debezium. `dispatcher`, the spelling of builds
 * before 0.3.0, is still read.
 */
function deliveryOf(value: string | undefined): CliArgs['delivery'] {
  switch (value ?? 'poll') {
    case 'poll':
    case 'log':
    case 'dispatcher':
      return 'dispatcher';
    case 'external':
      return 'external';
    default:
      throw new CliUsageError(
        `--delivery must be poll (the default; also for an app that tails the log: log) or external, as the app's delivery option.`,
      );
  }
}

/** `--with sequence,tenants`: each an option with a schema step of its own. */
function stepOptionsOf(value: string | undefined): readonly OutboxStepOption[] {
  if (value === undefined) return [];
  const asked = value.split(',').map((part) => part.trim());
  for (const option of asked) {
    if (!OUTBOX_STEP_OPTIONS.includes(option as OutboxStepOption)) {
      throw new CliUsageError(
        `--with takes a comma list of ${OUTBOX_STEP_OPTIONS.join(', ')} (the options with a schema step of their own); "${option}" is none of them.`,
      );
    }
  }
  return asked as OutboxStepOption[];
}

function partitionInterval(value: string | undefined): CliArgs['partitionBy'] {
  if (value === undefined) return undefined;
  if (value !== 'day' && value !== 'week' && value !== 'month') {
    throw new CliUsageError(`--partition-by must be day, week or month.`);
  }
  return value;
}

function premakeOf(value: string | undefined): number {
  if (value === undefined) return 3;
  const premake = Number(value);
  if (!/^\d+$/.test(value) || premake < 1 || premake > 1_000) {
    throw new CliUsageError(`--premake must be a whole number from 1 to 1000.`);
  }
  return premake;
}

function retentionOf(value: string | undefined): number {
  const retentionMs = parseDuration(value ?? '7d', 'retention');
  if (retentionMs < 60_000) {
    throw new CliUsageError(`--retention must be at least 1m (days are usual: 7d).`);
  }
  return retentionMs;
}

function helpArgs(): CliArgs {
  return {
    command: 'help',
    args: [],
    table: 'outbox',
    schema: null,
    json: false,
    dialect: undefined,
    onDeadLetter: 'block',
    filter: {},
    filtered: false,
    limit: undefined,
    after: undefined,
    all: false,
    yes: false,
    once: false,
    deliveredRetentionMs: 0,
    deadRetentionMs: null,
    longerThanMs: undefined,
    watch: false,
    intervalMs: 2_000,
    archive: false,
    audit: false,
    binaryIds: false,
    logTailing: false,
    slot: undefined,
    publication: undefined,
    partitionBy: undefined,
    premake: 3,
    retentionMs: 7 * 86_400_000,
    delivery: 'dispatcher',
    withSteps: [],
    online: false,
    cdc: cdcArgs({}),
    redrive: redriveArgs({}),
    dryRun: false,
  };
}

function watchInterval(text: string | undefined, watch: boolean): number {
  if (text === undefined) return 2_000;
  if (!watch) throw new CliUsageError('--interval goes with --watch.');
  const ms = parseDuration(text, 'interval');
  // Past a day a timer's delay overflows (Node caps it at 2^31 - 1 ms and fires at once).
  if (ms < 100 || ms > 86_400_000) throw new CliUsageError('--interval must be from 100ms to 1d.');
  return ms;
}

/**
 * node:util's parseArgs text ("Unknown option '--topc'. To specify a positional argument
 * starting with a '-', place it at the end of the command after '--', as in '-- \"--topc\"")
 * speaks to programmers: say it the CLI's way, with the option it likely meant.
 */
function usageProblem(argv: readonly string[], error: unknown): string {
  const code = (error as { code?: unknown }).code;
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
    const given = argv.find((a) => a.startsWith('-') && !isKnownFlag(a)) ?? '';
    const name = given.replace(/^-+/, '').split('=')[0] ?? '';
    const near = nearestOption(name);
    return `Unknown option ${given}${near === undefined ? '' : `: did you mean --${near}?`} (outbox --help lists them).`;
  }
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
    const message = error instanceof Error ? error.message : String(error);
    const option = /'(-[^']*)'/.exec(message)?.[1];
    return option === undefined
      ? 'An option is missing its value (outbox --help shows each one).'
      : `${option.split(',')[0]} needs a value (outbox --help shows it).`;
  }
  return error instanceof Error ? error.message : String(error);
}

function isKnownFlag(arg: string): boolean {
  const name = arg.replace(/^-+/, '').split('=')[0] ?? '';
  return (
    Object.hasOwn(OPTIONS, name) ||
    Object.values(OPTIONS).some((o) => 'short' in o && o.short === name)
  );
}

function nearestOption(name: string): string | undefined {
  const known = Object.fromEntries(Object.keys(OPTIONS).map((o) => [o, true as const]));
  return suggestOption('', name, { '': known });
}
