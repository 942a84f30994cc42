import { OutboxOptionsError } from '../../lib/errors/outbox-options.error';
import { tableNamesFor } from '../../lib/store/schema/outbox-table-ddl';
import type { BinlogClientEvent } from '../../lib/log-tailing/mysql/mysql-binlog-client';
import {
  compareBinlogPositions,
  formatBinlogPosition,
  parseBinlogPosition,
  retainedBinlogBytes,
} from '../../lib/log-tailing/mysql/mysql-binlog-position';
import { BinlogTransactions } from '../../lib/log-tailing/mysql/mysql-binlog-transactions';
import {
  mysqlBinlogProblems,
  type MysqlBinlogServerFacts,
} from '../../lib/log-tailing/mysql/mysql-log-tailing.checks';
import {
  mysqlLogLockName,
  mysqlLogTailingDdl,
  mysqlLogTailingDrop,
} from '../../lib/log-tailing/mysql/mysql-log-tailing.sql';

describe('binlog positions', () => {
  it('round-trips and orders by file sequence, then offset', () => {
    const p = parseBinlogPosition('mysql-bin.000009:1337');
    expect(p).toEqual({ file: 'mysql-bin.000009', offset: 1337 });
    expect(formatBinlogPosition(p)).toBe('mysql-bin.000009:1337');
    const next = parseBinlogPosition('mysql-bin.000010:4');
    expect(compareBinlogPositions(p, next)).toBeLessThan(0);
    expect(compareBinlogPositions(next, p)).toBeGreaterThan(0);
    expect(compareBinlogPositions(p, { file: 'mysql-bin.000009', offset: 1000 })).toBeGreaterThan(
      0,
    );
    expect(compareBinlogPositions(p, { ...p })).toBe(0);
  });

  it('refuses what is not a position it wrote', () => {
    for (const text of [
      '',
      '0/16B3748',
      'mysql-bin.000001',
      'mysql-bin:12',
      'mysql-bin.000001:x',
    ]) {
      expect(() => parseBinlogPosition(text)).toThrow(TypeError);
    }
  });

  it('counts the binlog bytes from a position to the end', () => {
    const files = [
      { file: 'mysql-bin.000001', size: 1_000 },
      { file: 'mysql-bin.000002', size: 2_000 },
      { file: 'mysql-bin.000003', size: 300 },
    ];
    expect(retainedBinlogBytes({ file: 'mysql-bin.000002', offset: 500 }, files)).toBe(1_800);
    expect(retainedBinlogBytes({ file: 'mysql-bin.000003', offset: 300 }, files)).toBe(0);
    // A purged file: every listed file after it counts.
    expect(retainedBinlogBytes({ file: 'mysql-bin.000000', offset: 4 }, files)).toBe(3_300);
  });
});

describe('the position table and the lock', () => {
  const names = tableNamesFor('mysql', { tableName: 'outbox' });

  it('creates and drops <table>_log_position', () => {
    expect(mysqlLogTailingDdl(names)[0]).toContain(
      'CREATE TABLE IF NOT EXISTS `outbox_log_position`',
    );
    expect(mysqlLogTailingDrop(names)).toEqual(['DROP TABLE IF EXISTS `outbox_log_position`']);
  });

  it('names the lock by database and table, within MySQL’s 64 characters', () => {
    expect(mysqlLogLockName('shop', names)).toBe('shop.outbox:log');
    const long = tableNamesFor('mysql', { tableName: 'o'.repeat(48) });
    const name = mysqlLogLockName('d'.repeat(60), long);
    expect(name.length).toBeLessThanOrEqual(64);
    expect(name).not.toBe(mysqlLogLockName('e'.repeat(60), long));
  });
});

describe('binlog events into transactions and batches', () => {
  const start = { file: 'mysql-bin.000001', offset: 100 };
  const tableMap = {
    7: { parentSchema: 'shop', tableName: 'outbox' },
    8: { parentSchema: 'shop', tableName: 'orders' },
  };
  const event = (name: string, fields: Partial<BinlogClientEvent> = {}): BinlogClientEvent => ({
    getEventName: () => name,
    nextPosition: 0,
    ...fields,
  });
  const rows = (tableId: number, ...ids: number[]): BinlogClientEvent =>
    event('writerows', {
      tableId,
      tableMap,
      rows: ids.map((id) => ({ id, message_key: `k${id}` })),
    });
  const gtid = event('mariadbgtid');
  const xid = (nextPosition: number): BinlogClientEvent => event('xid', { nextPosition });

  it('hands over the outbox rows of committed transactions, positions after each', () => {
    const t = new BinlogTransactions('shop', 'outbox', start);
    expect(t.accept(event('rotate', { binlogName: 'mysql-bin.000001' }))).toBe(false);
    for (const e of [gtid, rows(7, 1, 2), rows(8, 99), xid(200)]) t.accept(e);
    for (const e of [gtid, rows(8, 100), xid(300)]) t.accept(e);
    for (const e of [gtid, rows(7, 3), xid(400)]) t.accept(e);
    expect(t.waiting).toBe(3);
    expect(t.take(500)).toEqual({
      inserts: [
        { id: '1', key: 'k1' },
        { id: '2', key: 'k2' },
        { id: '3', key: 'k3' },
      ],
      position: 'mysql-bin.000001:400',
    });
    expect(t.take(500)).toBeNull();
    expect(t.readPosition).toEqual({ file: 'mysql-bin.000001', offset: 400 });
  });

  it('keeps a transaction in one batch unless it alone is over the limit', () => {
    const t = new BinlogTransactions('shop', 'outbox', start);
    for (const e of [gtid, rows(7, 1, 2), xid(200), gtid, rows(7, 3, 4), xid(300)]) t.accept(e);
    expect(t.take(3)).toEqual({
      inserts: [
        { id: '1', key: 'k1' },
        { id: '2', key: 'k2' },
      ],
      position: 'mysql-bin.000001:200',
    });
    for (const e of [gtid, rows(7, 5, 6, 7, 8), xid(400)]) t.accept(e);
    expect(t.take(3)?.position).toBe('mysql-bin.000001:300');
    // The parts of the large one: the first acknowledges only what came before it.
    expect(t.take(3)).toEqual({
      inserts: [
        { id: '5', key: 'k5' },
        { id: '6', key: 'k6' },
        { id: '7', key: 'k7' },
      ],
      position: 'mysql-bin.000001:300',
    });
    expect(t.take(3)).toEqual({
      inserts: [{ id: '8', key: 'k8' }],
      position: 'mysql-bin.000001:400',
    });
  });

  it('follows a rotate into the next file, and closes groups at COMMIT and DDL queries', () => {
    const t = new BinlogTransactions('shop', 'outbox', start);
    t.accept(event('rotate', { binlogName: 'mysql-bin.000002' }));
    for (const e of [
      event('query', { query: 'BEGIN' }),
      rows(7, 1),
      event('query', { query: 'COMMIT', nextPosition: 250 }),
    ]) {
      t.accept(e);
    }
    expect(t.take(10)?.position).toBe('mysql-bin.000002:250');
    t.accept(event('query', { query: 'ALTER TABLE orders ADD x INT', nextPosition: 300 }));
    expect(t.take(10)).toBeNull();
    expect(t.readPosition).toEqual({ file: 'mysql-bin.000002', offset: 300 });
  });

  it('drops rows a transaction start finds open (an XA transaction only prepared)', () => {
    const t = new BinlogTransactions('shop', 'outbox', start);
    for (const e of [gtid, rows(7, 1), gtid, rows(7, 2), xid(300)]) t.accept(e);
    expect(t.take(10)?.inserts).toEqual([{ id: '2', key: 'k2' }]);
  });

  it('keeps no ids of a transaction past its bound: the batch says how many it left to the table', () => {
    const sizes: number[] = [];
    const t = new BinlogTransactions('shop', 'outbox', start, {
      maxInserts: 3,
      overflowed: (soFar) => sizes.push(soFar),
    });
    for (const e of [gtid, rows(7, 1), xid(200)]) t.accept(e);
    for (const e of [gtid, rows(7, 2, 3), rows(7, 4, 5, 6), xid(300)]) t.accept(e);
    for (const e of [gtid, rows(7, 7, 8, 9), xid(400)]) t.accept(e);
    expect(sizes).toEqual([4]);
    expect(t.waiting).toBe(4);
    expect(t.take(500)).toEqual({
      inserts: [
        { id: '1', key: 'k1' },
        { id: '7', key: 'k7' },
        { id: '8', key: 'k8' },
        { id: '9', key: 'k9' },
      ],
      leftToTable: 5,
      position: 'mysql-bin.000001:400',
    });
    // An overflowed transaction alone is still a batch: its end must be acknowledged.
    for (const e of [gtid, rows(7, 10, 11, 12, 13), xid(500)]) t.accept(e);
    expect(t.take(500)).toEqual({ inserts: [], leftToTable: 4, position: 'mysql-bin.000001:500' });
    expect(sizes).toEqual([4, 4]);
  });

  it('reads a null key as null and a binary key as text', () => {
    const t = new BinlogTransactions('shop', 'outbox', start);
    t.accept(
      event('writerows', {
        tableId: 7,
        tableMap,
        rows: [
          { id: '9007199254740993', message_key: null },
          { id: 2, message_key: Buffer.from('ä') },
        ],
      }),
    );
    t.accept(xid(200));
    expect(t.take(10)?.inserts).toEqual([
      { id: '9007199254740993', key: null },
      { id: '2', key: 'ä' },
    ]);
  });
});

describe('the server check', () => {
  const ready: MysqlBinlogServerFacts = {
    version: '10.11.19-MariaDB-0+deb12u1-log',
    logBin: true,
    binlogFormat: 'ROW',
    binlogRowImage: 'FULL',
    user: "'outbox'@'%'",
    grants: [
      'GRANT BINLOG MONITOR, REPLICATION SLAVE ON *.* TO `outbox`@`%`',
      'GRANT SELECT, INSERT ON `shop`.`outbox` TO `outbox`@`%`',
    ],
    transactionCompression: false,
    tableVisible: true,
    table: 'shop.outbox',
  };

  const problem = (facts: Partial<MysqlBinlogServerFacts>): OutboxOptionsError => {
    const error = mysqlBinlogProblems({ ...ready, ...facts });
    if (error === null) throw new Error('expected a problem');
    return error;
  };

  it('passes a server set up for it, with the grants or with ALL PRIVILEGES', () => {
    expect(mysqlBinlogProblems(ready)).toBeNull();
    expect(
      mysqlBinlogProblems({
        ...ready,
        version: '8.4.3',
        grants: ['GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `outbox`@`%`'],
      }),
    ).toBeNull();
    expect(
      mysqlBinlogProblems({
        ...ready,
        grants: ['GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION'],
      }),
    ).toBeNull();
  });

  it('names log_bin and how to turn it on', () => {
    const error = problem({ logBin: false });
    expect(error).toBeInstanceOf(OutboxOptionsError);
    expect(error.option).toBe('log_bin');
    expect(error.message).toContain('log_bin = mysql-bin');
    expect(error.message).toContain('restart');
  });

  it('names binlog_format, binlog_row_image and the compression, with their fixes', () => {
    const format = problem({ binlogFormat: 'MIXED' });
    expect(format.option).toBe('binlog_format');
    expect(format.message).toContain('binlog_format is MIXED');
    expect(format.message).toContain('binlog_format = ROW');
    expect(format.message).toContain('parameter group');
    const image = problem({ binlogRowImage: 'MINIMAL' });
    expect(image.option).toBe('binlog_row_image');
    expect(image.message).toContain('binlog_row_image = FULL');
    expect(problem({ transactionCompression: true }).message).toContain(
      'binlog_transaction_compression = OFF',
    );
  });

  it('names the missing grants with the GRANT statement, by the server’s name for them', () => {
    const mariadb = problem({ grants: ['GRANT USAGE ON *.* TO `outbox`@`%`'] });
    expect(mariadb.option).toBe('REPLICATION SLAVE');
    expect(mariadb.message).toContain("GRANT REPLICATION SLAVE ON *.* TO 'outbox'@'%';");
    expect(mariadb.message).toContain("GRANT BINLOG MONITOR ON *.* TO 'outbox'@'%';");
    const mysql = problem({
      version: '8.0.36',
      grants: ['GRANT REPLICATION SLAVE ON *.* TO `outbox`@`%`'],
    });
    expect(mysql.option).toBe('REPLICATION CLIENT');
    expect(mysql.message).toContain("GRANT REPLICATION CLIENT ON *.* TO 'outbox'@'%';");
    // A privilege on one database is not one on *.*.
    expect(
      problem({ grants: ['GRANT REPLICATION SLAVE ON `shop`.* TO `outbox`@`%`'] }).option,
    ).toBe('REPLICATION SLAVE');
  });

  it('counts SHOW BINARY LOGS that ran as the monitor grant (held through a role)', () => {
    const error = problem({
      grants: ['GRANT `replicator` TO `outbox`@`%`', 'GRANT USAGE ON *.* TO `outbox`@`%`'],
      binlogMonitor: true,
    });
    expect(error.option).toBe('REPLICATION SLAVE');
    expect(error.message).not.toContain('BINLOG MONITOR');
  });

  it('names the table the binlog user cannot see', () => {
    const error = problem({ tableVisible: false });
    expect(error.message).toContain("GRANT SELECT ON shop.outbox TO 'outbox'@'%';");
  });

  it('lists every missing setting in one error', () => {
    const error = problem({ logBin: false, binlogFormat: 'STATEMENT' });
    expect(error.option).toBe('log_bin');
    expect(error.message).toContain('2 server settings are missing');
    expect(error.message).toContain('binlog_format is STATEMENT');
  });
});
