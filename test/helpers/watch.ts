import { unwatchDeadline, watchDeadline, type Deadline } from '../../src/deadline';

/** `listener(reason)` once when `deadline` aborts, through the package's one way (watchDeadline); returns the unwatch. */
export function watchAbort(deadline: Deadline, listener: (reason: unknown) => void): () => void {
  const watcher = { onAbort: listener };
  watchDeadline(deadline, watcher);
  return () => unwatchDeadline(deadline, watcher);
}
