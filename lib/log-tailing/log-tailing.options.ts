import type { BinlogClientClass } from './mysql/mysql-binlog-client';

/** The options of `logTailing()`. */
export interface LogTailingOptions {
  /**
   * The replication slot (PostgreSQL only; refused on MySQL/MariaDB): lower-case letters,
   * digits and `_`, at most 63.
   * @default `outbox_<database>_<schema>_<table>`, lower-cased (one per outbox table)
   */
  slotName?: string;
  /**
   * The publication of the outbox table (PostgreSQL only; refused on MySQL/MariaDB).
   * @default `outbox_<schema>_<table>`
   */
  publicationName?: string;
  /**
   * How the replication connection reaches the server: `postgres://…` as a role with
   * REPLICATION; `mysql://user:password@host:3306/db` as a user with REPLICATION SLAVE and
   * REPLICATION CLIENT (BINLOG MONITOR on MariaDB). The password is never logged.
   * @default the instance's own connection settings (a TypeORM DataSource's), else required
   */
  connectionString?: string;
  /**
   * How often a standby asks for the log while another process reads it (on MySQL/MariaDB
   * also how often a lost binlog connection is retried). @default 1000
   */
  standbyRetryMs?: number;
  /**
   * The longest the log's reader waits for the server before it takes the link for dead, stops
   * reading and lets a standby take over. MySQL/MariaDB: a connect, a check that it still holds
   * the reader's lock, a statement; silence on the binlog connection, which the server fills
   * with heartbeats. The server ends the lock's session after `standbyRetryMs + readerTimeoutMs`
   * (rounded up to whole seconds, plus one) without a word from it. PostgreSQL: the replication
   * connection's connect, and the check (every `standbyRetryMs`) that the server still counts
   * this process as the slot's reader; the server ends a replication session silent for
   * `standbyRetryMs + readerTimeoutMs` (its `wal_sender_timeout`, set for this session). Either
   * way a standby takes over from a reader cut off or frozen, and TCP keep-alive probes start
   * after `readerTimeoutMs` of silence. @default 5000
   */
  readerTimeoutMs?: number;
  /**
   * PostgreSQL: the longest making the replication slot (at the first start, or after the slot
   * was lost) waits for the write transactions open on the server, which PostgreSQL waits for
   * before it makes a logical slot. Past it the start fails with
   * `OutboxReplicationSlotWaitError`, naming the oldest such session's pid. `outbox log setup`
   * makes the slot ahead of a deploy. @default 10000
   */
  createSlotTimeoutMs?: number;
  /**
   * How often the dispatcher still polls the table (retries, promotions, rows the log's reader
   * left to the table). @default 5000
   */
  sweepIntervalMs?: number;
  /**
   * How long the ids at hand wait for more before a batch smaller than `batchSize` is leased,
   * while another batch is in flight (with none in flight they go at once): at a steady trickle
   * of small transactions, commits share a lease, a publish and a settle instead of paying one
   * each. 0 leases at once. @default 1
   */
  lingerMs?: number;
  /**
   * Most inserts received and not yet handed over before reading pauses (PostgreSQL; the
   * MySQL/MariaDB reader pauses the binlog at 10 000). @default 50000
   */
  maxQueued?: number;
  /**
   * Most outbox inserts of one transaction the reader keeps in memory until its commit (about
   * 250 bytes each). A larger transaction (a backfill) is left whole to the table's sweep, which
   * the reader wakes at its commit and which delivers its messages in order; its end is
   * acknowledged like any other, and a WARN names this option. Without a bound one transaction
   * of millions of rows would run the reader out of memory, and every reader after it.
   * @default 10000
   */
  maxTransactionInserts?: number;
  /**
   * MySQL/MariaDB: the replica id the binlog reader announces, unique among the server's
   * replicas and readers. With one id given, a standby taking over from a reader that stopped
   * reading without closing its connection (a frozen process) waits until the server gives up
   * sending to that one (`net_write_timeout`, 60 s by default). @default a new number from
   * 1 000 000 000 up for each connection the reader opens
   */
  serverId?: number;
  /**
   * MySQL/MariaDB: the `@vlasky/zongji` class (its default export), for an app that loads it
   * itself. `@vlasky/zongji` is an ES module: a CommonJS app on Node 20.19+ needs nothing here
   * (it is loaded at the first start), but an app whose bundler or test runner cannot load ES
   * modules at run time (jest) imports it and passes it: `binlogClient: ZongJi`.
   * @default loaded from `@vlasky/zongji` when the dispatcher starts
   */
  binlogClient?: BinlogClientClass;
}
