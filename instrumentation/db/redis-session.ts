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
 * What a command that opens session state leaves behind when the cutoff
 * reaches it in flight (the server may have run it; the caller is told it
 * failed): a MULTI, or a WATCH. Returns the commands that end that state,
 * or undefined for any other command.
 */
export function cleanupAfterCut(name: string): readonly string[] | undefined {
  if (name === 'multi') return DISCARD_AND_UNWATCH;
  if (name === 'watch') return UNWATCH;
  return undefined;
}

/**
 * DISCARD ends a MULTI and drops what it queued (and its WATCH); UNWATCH
 * drops a WATCH whose MULTI was never sent (refused itself). Each is
 * harmless when there is nothing to end (DISCARD without MULTI is an error
 * reply, ignored).
 */
const DISCARD_AND_UNWATCH: readonly string[] = ['discard', 'unwatch'];
const UNWATCH: readonly string[] = ['unwatch'];

/**
 * Sends, in place of a refused EXEC, what leaves the connection as it was
 * before the transaction (DISCARD_AND_UNWATCH), now and in order, before any
 * later command on the connection: nothing queued is ever committed and no
 * later command of another request answers QUEUED.
 *
 * `Command` is the class of the refused command (ioredis's public `Command`).
 */
export function discardInsteadOfExec(Command: new (name: string) => object, send: Send): void {
  sendCleanup(Command, send, DISCARD_AND_UNWATCH);
}

/** Sends `names` (DISCARD, UNWATCH) below our guard, replies ignored. */
export function sendCleanup(Command: new (name: string) => object, send: Send, names: readonly string[]): void {
  for (const name of names) {
    const sent = send(new Command(name)) as SentCommand | undefined;
    const reply = sent?.promise ?? sent;
    if (reply instanceof Promise) reply.catch(() => undefined);
  }
}
