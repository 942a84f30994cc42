import { EventEmitter } from 'node:events';
import type { OutboxConnection } from '../../lib/testing';
import {
  connectionConformanceCases,
  type ConnectionConformanceCase,
  type ConnectionConformanceFixture,
  type ConnectionConformanceTarget,
  type SqlPort,
  type SqlRunner,
} from '../../lib/testing';
import type { PgPoolClient } from '../../lib/connections/pg';
import { describeWith } from '../support/services';
import { pgTarget } from './connection-targets';

// The connection conformance suite can fail where it says it checks: its cases run here against
// node-postgres connections broken on purpose, one contract each, and every one of them fails,
// with a message that names what broke. A case that passed here would pass a broken connection
// of someone else's library too.

type Tx = PgPoolClient;

/** The pg target, with its connection replaced by `breakIt(connection, fixture)`. */
function broken(
  name: string,
  breakIt: (
    connection: OutboxConnection<Tx>,
    fixture: ConnectionConformanceFixture<Tx>,
  ) => OutboxConnection<Tx>,
): ConnectionConformanceTarget<Tx> {
  const target = pgTarget();
  return {
    name: `${target.name} (${name})`,
    async setUp() {
      const fixture = await target.setUp();
      return {
        ...fixture,
        inTransaction: fixture.inTransaction.bind(fixture),
        killConnections: fixture.killConnections?.bind(fixture),
        tearDown: fixture.tearDown.bind(fixture),
        connection: breakIt(fixture.connection, fixture),
      };
    },
  };
}

/** `sql` with some of its members replaced; the others still called on the real port. */
function portWith(sql: SqlPort, replaced: Partial<SqlPort>): SqlPort {
  return new Proxy(sql, {
    get(real, property) {
      if (Object.hasOwn(replaced, property)) return replaced[property as keyof SqlPort];
      const value: unknown = Reflect.get(real, property, real);
      return typeof value === 'function' ? (value as () => unknown).bind(real) : value;
    },
  });
}

/** A runner that answers "no rows" where the statement failed. */
function swallowing(runner: SqlRunner): SqlRunner {
  return {
    query: (text, params, options) =>
      runner.query(text, params, options).catch(() => ({ rows: [], affected: 0 })),
  } as SqlRunner;
}

function theCase(
  target: ConnectionConformanceTarget<Tx>,
  named: string,
): ConnectionConformanceCase<Tx> {
  const found = connectionConformanceCases(target).find((c) => c.name.startsWith(named));
  if (found === undefined) throw new Error(`no conformance case starts with "${named}"`);
  return found;
}

const KILLED = 'survives its database connections being ended';
const UNAWAITED = 'an enqueue not awaited before the transaction rolls back';

describeWith(['postgres'], 'the connection conformance suite fails a broken connection', () => {
  it('a port that swallows a failed statement in its transaction fails the killed-connections case', async () => {
    const target = broken('swallows failed statements', (connection) => ({
      ...connection,
      sql: portWith(connection.sql, {
        transaction: (work) => connection.sql.transaction((tx) => work(swallowing(tx))),
      }),
    }));
    await expect(theCase(target, KILLED).run(target)).rejects.toThrow(
      /a statement on a connection the server ended succeeded/,
    );
  }, 120_000);

  it("a connection that runs the enqueue outside the caller's transaction (autocommit) fails the un-awaited rollback case", async () => {
    // Each statement in a short transaction of its own: it runs inside "a transaction", so the
    // store's check passes, and it commits whatever the caller's transaction does.
    const target = broken('autocommits outside the transaction', (connection) => ({
      ...connection,
      join: () => ({
        query: (text, params, options) =>
          connection.sql.transaction(async (own) => {
            // Given an id first, so the store's "in a transaction" check passes.
            await own.query('SELECT txid_current()');
            return own.query(text, params, options);
          }),
      }),
    }));
    await expect(theCase(target, UNAWAITED).run(target)).rejects.toThrow(
      /message\(s\) stayed after the rollback/,
    );
  }, 120_000);

  it("a port that leaks an 'error' event nobody listens to fails the killed-connections case", async () => {
    // As a driver's socket does when a connection it holds is lost: the failure is answered to
    // the caller, and also emitted as an 'error' event on an emitter no one listens to.
    const leaking = (runner: SqlRunner): SqlRunner =>
      ({
        query: (text, params, options) =>
          runner.query(text, params, options).catch((error: unknown) => {
            setImmediate(() => new EventEmitter().emit('error', error));
            throw error;
          }),
      }) as SqlRunner;
    const target = broken("leaks an 'error' event", (connection) => ({
      ...connection,
      sql: portWith(connection.sql, {
        query: (text, params, options) => leaking(connection.sql).query(text, params, options),
        transaction: (work) => connection.sql.transaction((tx) => work(leaking(tx))),
      }),
    }));
    await expect(theCase(target, KILLED).run(target)).rejects.toThrow(/reached the process/);
  }, 120_000);

  it('a port on which nothing ever settles fails the killed-connections case at its own deadline, rather than hanging', async () => {
    const refused = (): Promise<never> => Promise.reject(new Error('refused on purpose'));
    const target = broken('never settles', (connection) => ({
      ...connection,
      sql: portWith(connection.sql, {
        // Its plain transactions still work: the case's own held transaction waits for a
        // settle that never comes, which hung the case to the runner's timeout before.
        transactionOpening: refused,
        transactionStatement: refused,
      }),
    }));
    await expect(theCase(target, KILLED).run(target)).rejects.toThrow(
      /no settle succeeded in 30000 ms/,
    );
  }, 120_000);
});
