/**
 * `open`: the topic's next failed attempt is logged at warn. `quiet`: one was, less than the
 * interval ago; until the interval is over, the topic's failed attempts are only counted.
 */
export type TopicLogState = 'open' | 'quiet';

/** What to do with one failed attempt's line. */
export type TopicLogTurn =
  | {
      readonly loud: true;
      /** Failed attempts kept quiet since the last loud line. */ readonly quieted: number;
    }
  | { readonly loud: false };

/**
 * Lets one failed attempt per topic per interval be logged loudly: a handler or a broker that
 * fails every message says why at once, and an outage of many messages does not flood the log.
 */
export class TopicLogLimit {
  private readonly topics = new Map<string, { loudAt: number; quieted: number }>();

  constructor(
    private readonly intervalMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  state(topic: string): TopicLogState {
    const entry = this.topics.get(topic);
    return entry !== undefined && this.now() - entry.loudAt < this.intervalMs ? 'quiet' : 'open';
  }

  /** Takes the topic's turn for one failed attempt. */
  take(topic: string): TopicLogTurn {
    const entry = this.topics.get(topic);
    if (entry !== undefined && this.state(topic) === 'quiet') {
      entry.quieted += 1;
      return { loud: false };
    }
    this.topics.set(topic, { loudAt: this.now(), quieted: 0 });
    return { loud: true, quieted: entry?.quieted ?? 0 };
  }
}
