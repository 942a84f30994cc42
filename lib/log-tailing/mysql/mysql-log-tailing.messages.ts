/**
 * The text of the MySQL/MariaDB log source's errors: each names the server setting or grant and
 * how to change it. (Kept beside the source rather than in `outbox.messages.ts` while log
 * tailing is an entry point of its own.)
 */
export const MysqlLogTailingMessages = {
  intro: (problems: readonly string[]): string =>
    `Log tailing (MySQL/MariaDB binlog) cannot start: ${problems.length === 1 ? 'one server setting is' : `${problems.length} server settings are`} missing.\n- ${problems.join('\n- ')}\nSee docs/log-tailing.md#what-the-server-needs, or leave log tailing off: the dispatcher then polls the table alone.`,
  logBin: (): string =>
    'log_bin is OFF: the server writes no binlog. Set `log_bin = mysql-bin` under [mysqld] (MySQL 8 has it on by default; on RDS enable automated backups) and restart the server.',
  binlogFormat: (format: string): string =>
    `binlog_format is ${format}, not ROW: the binlog then carries statements, not the rows inserted. Set \`binlog_format = ROW\` under [mysqld] and restart (or SET GLOBAL binlog_format = 'ROW' and reconnect the writers; on RDS set it in the DB parameter group).`,
  binlogRowImage: (image: string): string =>
    `binlog_row_image is ${image}: an insert's logged row may then lack its id or key. Set \`binlog_row_image = FULL\` under [mysqld] and restart (or SET GLOBAL binlog_row_image = 'FULL'; on RDS in the DB parameter group).`,
  compression: (): string =>
    'binlog_transaction_compression is ON: the binlog reader cannot decompress the transactions it writes. Set `binlog_transaction_compression = OFF` under [mysqld] (or SET GLOBAL binlog_transaction_compression = OFF; on RDS in the DB parameter group).',
  replicationSlave: (user: string): string =>
    `the binlog user ${user} lacks REPLICATION SLAVE, which reading the binlog needs: GRANT REPLICATION SLAVE ON *.* TO ${user};`,
  binlogMonitor: (user: string, mariadb: boolean): string =>
    mariadb
      ? `the binlog user ${user} lacks BINLOG MONITOR, which SHOW BINARY LOGS (the start position and the lag) needs: GRANT BINLOG MONITOR ON *.* TO ${user}; (REPLICATION CLIENT is its older name)`
      : `the binlog user ${user} lacks REPLICATION CLIENT, which SHOW BINARY LOGS (the start position and the lag) needs: GRANT REPLICATION CLIENT ON *.* TO ${user};`,
  tableHidden: (user: string, table: string): string =>
    `the binlog user ${user} cannot see the columns of ${table}, which decoding its rows needs: GRANT SELECT ON ${table} TO ${user};`,
  cannotConnect: (login: string, cause: string): string =>
    `Log tailing could not log in to the binlog as ${login} (${cause}). Check logTailing({ connectionString }) (or the DataSource's host, port, username and password) and that the user exists with the grants in docs/log-tailing.md#the-binlog-user-and-its-grants.`,
  clientMissing: (cause: string): string =>
    `Log tailing on MySQL/MariaDB reads the binlog with @vlasky/zongji, which could not be loaded (${cause}). Install it: npm install @vlasky/zongji (where ES modules cannot be loaded at run time, as under jest, import it and pass logTailing({ binlogClient }))`,
} as const;
