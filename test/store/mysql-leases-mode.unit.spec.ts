import {
  mysqlLockNotGranted,
  mysqlSharedNowait,
} from '../../lib/store/mysql/mysql.delivery-partitions-sql';

// The 'leases' mode's locking read of the working members must not wait on the owner lock's
// session (mysql-delivery-partitions.spec runs it on MariaDB; MySQL 8 is not on this machine).
describe("the MySQL/MariaDB 'leases' mode read that does not wait", () => {
  it("is written in each server's own form", () => {
    expect(mysqlSharedNowait('10.11.6-MariaDB-0+deb12u1-log')).toBe('LOCK IN SHARE MODE NOWAIT');
    expect(mysqlSharedNowait('5.5.5-10.6.18-MariaDB')).toBe('LOCK IN SHARE MODE NOWAIT');
    // MySQL 8 takes NOWAIT only after FOR SHARE.
    expect(mysqlSharedNowait('8.0.36')).toBe('FOR SHARE NOWAIT');
  });

  it('tells a refused lock from other failures, as the driver or an ORM reports it', () => {
    const nowait = Object.assign(
      new Error('Statement aborted because lock(s) could not be acquired'),
      { errno: 3572 },
    );
    const mariadb = Object.assign(new Error('Lock wait timeout exceeded'), { errno: 1205 });
    expect(mysqlLockNotGranted(nowait)).toBe(true);
    expect(mysqlLockNotGranted(mariadb)).toBe(true);
    expect(mysqlLockNotGranted({ message: 'query failed', driverError: mariadb })).toBe(true);
    expect(mysqlLockNotGranted(new Error('wrapped', { cause: nowait }))).toBe(true);
    expect(mysqlLockNotGranted(Object.assign(new Error('gone'), { errno: 2013 }))).toBe(false);
    expect(mysqlLockNotGranted(undefined)).toBe(false);
  });
});
