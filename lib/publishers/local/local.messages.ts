/** The text of every message of the in-process transport, each saying how to fix what it reports. */
export const LocalMessages = {
  badSubscription: (what: string, problem: string): string =>
    `@OnOutboxMessage(): ${what} ${problem}. Use @OnOutboxMessage('orders') or @OnOutboxMessage({ topic: 'orders', type: 'order.created' }).`,
  notSingleton: (where: string): string =>
    `@OnOutboxMessage() on ${where}: the provider is request-scoped or transient, so there is no instance to deliver to after a commit. Make it a singleton (the default scope), or move the handler to one.`,
  noHandler: (topic: string): string =>
    `No @OnOutboxMessage() handler for topic "${topic}" in this app, so the message was not delivered to anyone. Add a handler (on a singleton provider of a module the app imports), or route the topic to a broker with routePublishers(); then retry the dead letter.`,
  noHandlerForType: (topic: string, type: string): string =>
    `No @OnOutboxMessage() handler for type "${type}" of topic "${topic}" in this app (the topic's handlers all name other types), so the message was not delivered to anyone. Add one for the topic (without a type, it takes every type) or for this type; then retry the dead letter.`,
  notJson: (messageId: string, problem: string): string =>
    `Message ${messageId}: its payload is not JSON (${problem}), so no handler can be given it.`,
  stillRunning: (handlers: string, running: string, runningForMs: number, held: string): string =>
    `${handlers} is still running for message ${running}, ${runningForMs} ms after it was handed over (past publishTimeoutMs); ${held === running ? 'it is' : `message ${held} of its key is`} handed back unsent, with no attempt counted, until that call returns. Make the handler finish within publishTimeoutMs, or honour message.signal.`,
  heldBack: (handlers: string, running: string): string =>
    `Not handed over: ${handlers} is still running for message ${running} of the same key`,
  handlersFound: (list: string): string => `In-process outbox handlers: ${list}`,
  noHandlersFound: (): string =>
    "No @OnOutboxMessage() handlers found: every message routed to the LocalPublisher will be dead-lettered. Are the handlers' providers in a module the app imports?",
  unrouted: (topic: string): string =>
    `No publisher routes topic "${topic}": routePublishers() has no route naming it and no fallback. Add the topic to a route, or give a fallback; then retry the dead letter.`,
  routeTwice: (topic: string): string =>
    `routePublishers(): topic "${topic}" is named by two routes. Name each topic in one route only.`,
  noRoutes: (): string => 'routePublishers(): give at least one route or a fallback publisher.',
  badRoute: (index: number, problem: string): string =>
    `routePublishers(): routes[${index}] ${problem}. A route is { topics: ['orders', …] or (topic) => boolean, publisher }.`,
  brokeContract: (returned: number, sent: number): string =>
    `The routed publisher returned ${returned} outcomes for ${sent} messages`,
} as const;
