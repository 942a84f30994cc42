import { AsyncLocalStorage } from 'node:async_hooks';

/** Runs `fn` in the async context captured by `captureAsyncContext`, whoever calls it. */
export type DetachedContext = <R>(fn: () => R) => R;

/**
 * The async context of now (a worker's construction, at bootstrap), to run the worker's runs in
 * later. A run asked for inside the app's `AsyncLocalStorage` stores (MikroORM's transaction
 * context, a nestjs-cls request and its `@Transactional()` transaction) would otherwise see
 * them: its transactions and those of its local handlers nested into the app's, its logs carried
 * the request's ids, and timers it armed kept that context after the request ended. Node has no
 * handle on an empty context, nor a way out of stores it does not know, so the context the
 * worker was made in stands for it.
 */
export function captureAsyncContext(): DetachedContext {
  const snapshot = AsyncLocalStorage.snapshot();
  return (fn) => snapshot(fn);
}
