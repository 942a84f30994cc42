import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { MysqlLogTailingMessages } from './mysql-log-tailing.messages';

/** What `check()` learns from the server, as the binlog user. */
export interface MysqlBinlogServerFacts {
  /** `SELECT VERSION()`. */
  readonly version: string;
  /** `@@log_bin`. */
  readonly logBin: boolean;
  /** `@@binlog_format`. */
  readonly binlogFormat: string;
  /** `@@binlog_row_image`. */
  readonly binlogRowImage: string;
  /** `CURRENT_USER()`, as `'user'@'host'`. */
  readonly user: string;
  /** The lines of `SHOW GRANTS`. */
  readonly grants: readonly string[];
  /** Whether `SHOW BINARY LOGS` ran (REPLICATION CLIENT / BINLOG MONITOR, however granted). */
  readonly binlogMonitor?: boolean;
  /** MySQL 8.0.20+ `@@binlog_transaction_compression` (MariaDB has none: false). */
  readonly transactionCompression: boolean;
  /** Whether the user sees the outbox table's columns in information_schema. */
  readonly tableVisible: boolean;
  /** The outbox table, `schema`.`table`. */
  readonly table: string;
}

// Row images that log every column of an inserted row (FULL_NODUP is MariaDB's).
const ROW_IMAGES = new Set(['FULL', 'NOBLOB', 'FULL_NODUP']);

/**
 * The settings and grants log tailing needs that the server lacks, as one `OutboxOptionsError`
 * (its `option` the first missing setting), or null when nothing is missing.
 */
export function mysqlBinlogProblems(facts: MysqlBinlogServerFacts): OutboxOptionsError | null {
  const mariadb = /mariadb/i.test(facts.version);
  const granted = privilegesOnEverything(facts.grants);
  const all = granted.has('ALL PRIVILEGES');
  const problems: [setting: string, text: string][] = [];
  if (!facts.logBin) problems.push(['log_bin', MysqlLogTailingMessages.logBin()]);
  const format = facts.binlogFormat.toUpperCase();
  if (format !== 'ROW') {
    problems.push(['binlog_format', MysqlLogTailingMessages.binlogFormat(format)]);
  }
  const image = facts.binlogRowImage.toUpperCase();
  if (!ROW_IMAGES.has(image)) {
    problems.push(['binlog_row_image', MysqlLogTailingMessages.binlogRowImage(image)]);
  }
  if (facts.transactionCompression) {
    problems.push(['binlog_transaction_compression', MysqlLogTailingMessages.compression()]);
  }
  if (!all && !granted.has('REPLICATION SLAVE')) {
    problems.push(['REPLICATION SLAVE', MysqlLogTailingMessages.replicationSlave(facts.user)]);
  }
  // MariaDB 10.5+ shows REPLICATION CLIENT as BINLOG MONITOR; older servers and MySQL as is.
  const monitors =
    facts.binlogMonitor === true ||
    granted.has('REPLICATION CLIENT') ||
    granted.has('BINLOG MONITOR');
  if (!all && !monitors) {
    problems.push([
      mariadb ? 'BINLOG MONITOR' : 'REPLICATION CLIENT',
      MysqlLogTailingMessages.binlogMonitor(facts.user, mariadb),
    ]);
  }
  if (!facts.tableVisible) {
    problems.push(['SELECT', MysqlLogTailingMessages.tableHidden(facts.user, facts.table)]);
  }
  const first = problems[0];
  if (first === undefined) return null;
  return new OutboxOptionsError(
    MysqlLogTailingMessages.intro(problems.map(([, text]) => text)),
    first[0],
  );
}

/** The privileges granted `ON *.*` by the `SHOW GRANTS` lines, upper case. */
function privilegesOnEverything(grants: readonly string[]): Set<string> {
  const granted = new Set<string>();
  for (const line of grants) {
    const match = /^GRANT\s+(.+?)\s+ON\s+\*\.\*\s+TO\s/i.exec(line);
    if (match?.[1] === undefined) continue;
    for (const privilege of match[1].split(',')) {
      granted.add(privilege.trim().toUpperCase().replace(/\s+/g, ' '));
    }
  }
  return granted;
}
