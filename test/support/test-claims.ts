/**
 * The `dispatcher.claims` this jest project gives the dispatch suites (OUTBOX_TEST_CLAIMS: the
 * `partitions` and `stream` projects' 'partitions'), or undefined: the module's own choice
 * ('leases'; the table's once CLAIMS_DEFAULT_BY_TABLE is on: partitions on PostgreSQL, whose test
 * tables have every step).
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
