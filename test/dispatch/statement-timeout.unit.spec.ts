import { isStatementTimeout } from '../../lib/dispatch/health/statement-timeout';

describe('isStatementTimeout', () => {
  const pg = (message: string) => Object.assign(new Error(message), { code: '57014' });

  it("knows PostgreSQL's statement timeout, bare or wrapped by an ORM", () => {
    expect(isStatementTimeout(pg('canceling statement due to statement timeout'))).toBe(true);
    const wrapped = Object.assign(new Error('query failed'), {
      driverError: pg('canceling statement due to statement timeout'),
    });
    expect(isStatementTimeout(wrapped)).toBe(true);
    expect(
      isStatementTimeout(
        new Error('store', { cause: pg('canceling statement due to statement timeout') }),
      ),
    ).toBe(true);
  });

  it('knows MySQL and MariaDB statement time limits by errno', () => {
    expect(isStatementTimeout(Object.assign(new Error('x'), { errno: 3024 }))).toBe(true);
    expect(isStatementTimeout(Object.assign(new Error('x'), { errno: 1969 }))).toBe(true);
  });

  it('is not fooled by a cancel for another reason, a lost connection or a non-error', () => {
    expect(isStatementTimeout(pg('canceling statement due to user request'))).toBe(false);
    expect(isStatementTimeout(Object.assign(new Error('x'), { code: 'ECONNRESET' }))).toBe(false);
    expect(isStatementTimeout(undefined)).toBe(false);
    expect(isStatementTimeout('57014')).toBe(false);
  });
});
