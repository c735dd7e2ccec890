/**
 * Watches the timers created from now on (ref'd or not) until `restore`: a
 * timer is live until it fires or is cleared.
 */
export function watchTimers(): { live(): number; restore(): void } {
  const realSet = globalThis.setTimeout;
  const realClear = globalThis.clearTimeout;
  const live = new Set<unknown>();
  // Extra arguments pass through: undici, for one, hands its timer callbacks their state that way.
  globalThis.setTimeout = ((fn: (...args: unknown[]) => void, ms?: number, ...args: unknown[]) => {
    const handle = realSet(() => {
      live.delete(handle);
      fn(...args);
    }, ms);
    live.add(handle);
    return handle;
  }) as typeof setTimeout;
  globalThis.clearTimeout = ((handle: ReturnType<typeof setTimeout>) => {
    live.delete(handle);
    realClear(handle);
  }) as typeof clearTimeout;
  return {
    live: () => live.size,
    restore() {
      globalThis.setTimeout = realSet;
      globalThis.clearTimeout = realClear;
    },
  };
}
