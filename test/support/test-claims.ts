/**
 * The `dispatcher.claims` this jest project gives the dispatch suites (OUTBOX_TEST_CLAIMS: the
 * `leases` project's 'leases', the `stream` project's 'partitions'), or undefined: the module's
 * own choice, the table's (partitions on PostgreSQL, whose test tables have every step; leases on
 * MariaDB and SQLite).
 */
export const CLAIMS: 'leases' | 'partitions' | undefined =
  process.env.OUTBOX_TEST_CLAIMS === 'leases' || process.env.OUTBOX_TEST_CLAIMS === 'partitions'
    ? process.env.OUTBOX_TEST_CLAIMS
    : undefined;

/**
 * The options of the claim loop's own suites (those on `POLL_RUN_DATABASES`, and the specs that
 * are the 'leases' mode's own): row leases on every database, PostgreSQL included, whatever the
 * project's mode. The promise suites (`SOURCE_CASES`) run on the project's mode instead.
 */
export const CLAIM_LOOP = { dispatcher: { claims: 'leases' } } as const;
