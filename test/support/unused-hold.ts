import type { BatchHold } from '../../lib/dispatch/pipeline/batch-hold';

/**
 * The hold of a batch in a unit test whose class hands batches on without looking at their
 * hold (the claim loop, the quiet lane, the log tailer): any use of it fails the test.
 */
export const unusedHold: BatchHold = new Proxy({} as BatchHold, {
  get(_, property) {
    if (property === 'then' || typeof property === 'symbol') return undefined;
    throw new Error(`the batch's hold (${property}) is not used here`);
  },
});
