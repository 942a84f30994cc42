import type { SqlSession } from '../../lib/store/ports/sql-port';

/**
 * A lock session for the owner locks' unit tests: its `SELECT 1` answers, fails or hangs as the
 * test says, and it records how it was given back.
 */
export class FakeLockSession {
  /** `'held'`: questions wait until `resume()` answers them. */
  answer: 'ok' | 'fail' | 'hang' | 'held' = 'ok';
  private readonly waiting: (() => void)[] = [];
  /** How release was called: true, closed; false, pooled again. */
  released: boolean | undefined;
  unlocked = false;

  query(): Promise<{ rows: unknown[]; affected: number }> {
    if (this.answer === 'fail') return Promise.reject(new Error('connection terminated'));
    if (this.answer === 'hang') return new Promise(() => undefined);
    if (this.answer === 'held') {
      return new Promise((resolve) =>
        this.waiting.push(() => resolve({ rows: [{ '?column?': 1 }], affected: 0 })),
      );
    }
    return Promise.resolve({ rows: [{ '?column?': 1 }], affected: 0 });
  }

  /** Answers the questions held so far, and those to come. */
  resume(): void {
    this.answer = 'ok';
    for (const answer of this.waiting.splice(0)) answer();
  }

  release(destroy?: boolean): Promise<void> {
    this.released = destroy === true;
    return Promise.resolve();
  }

  /** Typed as the port's session, which the fake answers for as far as the locks use it. */
  asSession(): SqlSession {
    return this as unknown as SqlSession;
  }
}
