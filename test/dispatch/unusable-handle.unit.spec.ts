import { QueryRunnerAlreadyReleasedError } from 'typeorm';
import { isUnusableHandle } from '../../lib/dispatch/health/unusable-handle';

// Which claim failures are a finished handle (no outage pause) rather than a database that
// cannot be reached: the drivers' own errors, as thrown or wrapped.

describe('isUnusableHandle', () => {
  it("knows knex's ended transaction and TypeORM's released query runner, wrapped or not", () => {
    const knex = new Error(
      'Transaction query already complete, run with DEBUG=knex:tx for more info',
    );
    expect(isUnusableHandle(knex)).toBe(true);
    expect(isUnusableHandle(new QueryRunnerAlreadyReleasedError())).toBe(true);
    expect(isUnusableHandle(new Error('claim failed', { cause: knex }))).toBe(true);
  });

  it('leaves a database that cannot be reached, and anything else, to the outage path', () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), {
      code: 'ECONNREFUSED',
    });
    expect(isUnusableHandle(refused)).toBe(false);
    expect(isUnusableHandle(new Error('Connection terminated unexpectedly'))).toBe(false);
    expect(isUnusableHandle('Transaction query already complete')).toBe(false);
    expect(isUnusableHandle(undefined)).toBe(false);
  });
});
