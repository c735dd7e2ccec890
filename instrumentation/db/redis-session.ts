/**
 * Redis commands that end a transaction or restore a connection's session
 * state (issue 35 §2). The state they clean (an open MULTI, a WATCH) belongs
 * to the connection, which outlives the request: they are never refused,
 * delayed or cut, and an EXEC that is refused cleans up in its place.
 */

/** DISCARD, UNWATCH, RESET (lower case): sent whatever the clock says, with no guard. */
const CLEANUP = new Set(['discard', 'unwatch', 'reset']);

export function isSessionCleanup(name: string): boolean {
  return CLEANUP.has(name);
}

/** What sends a command on the connection, below our guard. */
type Send = (command: object) => unknown;

interface SentCommand {
  promise?: Promise<unknown>;
}

/**
 * Sends, in place of a refused EXEC, what leaves the connection as it was
 * before the transaction: DISCARD ends a MULTI and drops what it queued (and
 * its WATCH); UNWATCH drops a WATCH whose MULTI was never sent (refused
 * itself). Each is harmless when there is nothing to end (DISCARD without
 * MULTI is an error reply, ignored). Both go out now, in order, before any
 * later command on the connection, so nothing queued is ever committed and
 * no later command of another request answers QUEUED.
 *
 * `Command` is the class of the refused command (ioredis's public `Command`).
 */
export function discardInsteadOfExec(Command: new (name: string) => object, send: Send): void {
  for (const name of ['discard', 'unwatch']) {
    const sent = send(new Command(name)) as SentCommand | undefined;
    const reply = sent?.promise ?? sent;
    if (reply instanceof Promise) reply.catch(() => undefined);
  }
}
