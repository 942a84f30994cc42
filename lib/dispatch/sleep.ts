/** A timer that, when `unref`, does not keep a stopping process alive. */
export const sleep = (ms: number, unref = false): Promise<void> =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    if (unref) timer.unref();
  });

/** The promise's value if it resolves within `ms`; undefined if not (or if it rejects). */
export async function within<T>(
  promise: Promise<T>,
  ms: number,
): Promise<{ value: T } | undefined> {
  if (ms <= 0) return undefined;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  try {
    return await Promise.race([
      promise.then(
        (value) => ({ value }),
        () => undefined,
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}
