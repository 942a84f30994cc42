export default async function globalTeardown(): Promise<void> {
  const containers = (globalThis as { __outboxContainers?: { stop(): Promise<unknown> }[] }).__outboxContainers ?? [];
  await Promise.all(containers.map((c) => c.stop()));
}
