/**
 * Settles with `work`, or rejects with the signal's reason as soon as it aborts (the work itself
 * is left to finish; its late rejection is swallowed).
 */
export async function raceAbort<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  const reason = (): Error =>
    signal.reason instanceof Error ? signal.reason : new Error(String(signal.reason));
  if (signal.aborted) {
    work.catch(() => undefined);
    throw reason();
  }
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(reason());
    signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    return await Promise.race([work, aborted]);
  } catch (error) {
    work.catch(() => undefined);
    throw error;
  } finally {
    if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
  }
}
