import { refuseUnknownCallOptions } from '../../internal/known-keys';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { PermanentPublishError } from '../../errors/permanent-publish.error';
import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';
import { describeError } from '../../internal/describe-error';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import { LocalMessages } from '../local/local.messages';
import type { OutboxPublisher, PublishOutcome } from '../outbox-publisher.interface';

/** Which topics one publisher takes. */
export interface PublisherRoute {
  /** The topics, by name, or a test on the topic (e.g. `(t) => local.handles(t)`). */
  readonly topics: readonly string[] | ((topic: string) => boolean);
  readonly publisher: OutboxPublisher;
}

/** Options of {@link routePublishers}. */
export interface RoutePublishersOptions {
  /** Tried in order; the first whose `topics` takes a message's topic publishes it. */
  readonly routes: readonly PublisherRoute[];
  /**
   * Publishes every topic no route takes. Without it, such a message is dead-lettered with a
   * `PermanentPublishError` naming the topic. @default none
   */
  readonly fallback?: OutboxPublisher;
}

interface CompiledRoute {
  readonly takes: (topic: string) => boolean;
  readonly publisher: OutboxPublisher;
}

function compile(options: RoutePublishersOptions): CompiledRoute[] {
  const given: unknown = options.routes;
  if (!Array.isArray(given)) throw new OutboxOptionsError(LocalMessages.noRoutes(), 'routes');
  const named = new Set<string>();
  return options.routes.map((route, index): CompiledRoute => {
    const { topics, publisher } = route;
    if (typeof (publisher as Partial<OutboxPublisher> | undefined)?.publish !== 'function') {
      throw new OutboxOptionsError(
        LocalMessages.badRoute(index, 'has no publisher'),
        `routes[${index}].publisher`,
      );
    }
    if (typeof topics === 'function') return { takes: topics, publisher };
    const given: unknown = topics;
    if (!Array.isArray(given) || given.some((t: unknown) => typeof t !== 'string' || t === '')) {
      throw new OutboxOptionsError(
        LocalMessages.badRoute(index, 'names no topics (a list of non-empty strings, or a test)'),
        `routes[${index}].topics`,
      );
    }
    for (const topic of topics) {
      if (named.has(topic))
        throw new OutboxOptionsError(LocalMessages.routeTwice(topic), `routes[${index}].topics`);
      named.add(topic);
    }
    const set = new Set(topics);
    return { takes: (topic) => set.has(topic), publisher };
  });
}

/**
 * One publisher made of several, chosen per topic: e.g. the topics that modules of this app
 * handle to the `LocalPublisher`, the rest to Kafka or RabbitMQ. Each publisher gets its part of a
 * batch (in claim order, with the batch's abort signal) at the same time as the others; the
 * outcomes are put back in the batch's order.
 *
 * A publisher that throws (cannot reach its broker) fails only its own messages, with
 * `PublisherUnavailableError`: a batch all of whose messages went to it is an outage, as it would
 * be without the router (released, no attempt counted, claims paused); in a batch mixed with
 * other publishers' messages, its messages count an attempt and back off while the others are
 * delivered. `close()` closes each publisher once; `ping()` asks every publisher that can be
 * asked; `checkEnqueue()` asks the publisher of the message's topic.
 */
export function routePublishers(options: RoutePublishersOptions): OutboxPublisher {
  refuseUnknownCallOptions('routePublishers()', options, {
    '': { routes: true, fallback: true } satisfies Record<keyof RoutePublishersOptions, true>,
  });
  const routes = compile(options);
  const fallback = options.fallback;
  if (routes.length === 0 && fallback === undefined) {
    throw new OutboxOptionsError(LocalMessages.noRoutes(), 'routes');
  }
  const publishers = [
    ...new Set([...routes.map((r) => r.publisher), ...(fallback === undefined ? [] : [fallback])]),
  ];
  const routeOf = (topic: string): OutboxPublisher | undefined =>
    routes.find((route) => route.takes(topic))?.publisher ?? fallback;

  return {
    async publish(messages, signal) {
      const outcomes = new Array<PublishOutcome>(messages.length);
      const parts = new Map<OutboxPublisher, number[]>();
      messages.forEach((record, i) => {
        const publisher = routeOf(record.topic);
        if (publisher === undefined) {
          outcomes[i] = {
            ok: false,
            error: new PermanentPublishError(LocalMessages.unrouted(record.topic)),
          };
          return;
        }
        const part = parts.get(publisher) ?? [];
        part.push(i);
        parts.set(publisher, part);
      });
      await Promise.all(
        [...parts].map(async ([publisher, indexes]) => {
          const part = indexes.map((i) => messages[i] as OutboxRecord);
          const answers = await publishPart(publisher, part, signal);
          indexes.forEach((i, n) => {
            outcomes[i] = answers[n] as PublishOutcome;
          });
        }),
      );
      return outcomes;
    },
    async close() {
      // Every publisher is closed even when one fails; the first failure is reported.
      const results = await Promise.allSettled(
        publishers.map((p) => p.close?.() ?? Promise.resolve()),
      );
      const failed = results.find((r) => r.status === 'rejected');
      if (failed !== undefined) throw failed.reason;
    },
    async ping(signal) {
      await Promise.all(publishers.map((p) => p.ping?.(signal) ?? Promise.resolve()));
    },
    // An unrouted topic is the dispatcher's to dead-letter, as before: only a route's own
    // publisher checks its messages.
    checkEnqueue: (message) => routeOf(message.topic)?.checkEnqueue?.(message),
  };
}

/** One publisher's part of a batch: its outcomes, or its failure as each message's. */
async function publishPart(
  publisher: OutboxPublisher,
  part: readonly OutboxRecord[],
  signal: AbortSignal,
): Promise<readonly PublishOutcome[]> {
  let answers: readonly PublishOutcome[];
  try {
    answers = await publisher.publish(part, signal);
  } catch (error) {
    const unavailable =
      error instanceof PublisherUnavailableError
        ? error
        : new PublisherUnavailableError(describeError(error), { cause: error });
    return part.map(() => ({ ok: false, error: unavailable }));
  }
  if (answers.length === part.length) return answers;
  const broken = new PublisherUnavailableError(
    LocalMessages.brokeContract(answers.length, part.length),
  );
  return part.map(() => ({ ok: false, error: broken }));
}
