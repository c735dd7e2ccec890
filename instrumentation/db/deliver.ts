/**
 * Calls a driver callback as the drivers do: a throw is rethrown on the next tick (uncaught, as without us), never
 * swallowed by the abort notification that may be running it.
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

export type NodeCallback = (err: unknown, ...results: unknown[]) => void;

/** The caller's callback, or one that settles the promise returned (in the driver's promise class) when there is none. */
export function callbackOrPromise(given: unknown, PromiseClass: PromiseConstructor = Promise): [NodeCallback, Promise<unknown> | undefined] {
  if (isFunction(given)) return [given as NodeCallback, undefined];
  let callback: NodeCallback;
  const promise = new PromiseClass((resolve, reject) => {
    callback = (err, result) => (err ? reject(err) : resolve(result));
  });
  return [callback!, promise];
}
