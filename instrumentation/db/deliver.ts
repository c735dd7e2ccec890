/**
 * Calls a driver callback the way the drivers do: an exception it throws is
 * rethrown on the next tick (an uncaught exception, as without us), never
 * swallowed by the deadline's abort notification that may be running it.
 */
export function deliver(callback: (...args: never[]) => unknown, ...args: unknown[]): void {
  try {
    (callback as (...a: unknown[]) => unknown)(...args);
  } catch (err) {
    process.nextTick(() => {
      throw err;
    });
  }
}

export function isFunction(value: unknown): value is (...args: never[]) => unknown {
  return typeof value === 'function';
}
