import type { Socket } from 'node:net';
import type { Deadline } from '../../src/deadline';
import { DeadlineNode } from '../../src/deadline-node';

/**
 * The last look at the clock before a guarded request's first bytes go to
 * its socket.
 *
 * The transports check the deadline right before they write a request
 * (undici's sendHeaders, node:http's socket assignment), but they still
 * build strings between that check and `socket.write`, and an allocation
 * there can start a garbage collection that outlasts the cutoff: the request
 * then goes out late. Checking again inside `socket.write` itself, before
 * anything is allocated, leaves no such gap.
 *
 * The socket's `write` is wrapped once, on the socket (a public method of a
 * long-lived object; the class is untouched), and a guard is armed for the
 * next write only: every later write of the same request, and every write of
 * an unguarded request, costs one property read.
 */

/** What to do if the next write on a socket comes after the cutoff. */
interface PendingWrite {
  /** The request the next write belongs to. */
  owner: object;
  deadline: Deadline;
  /** Called with the abort reason instead of the write, after `refused`. */
  abort: (reason: unknown) => void;
  /** Called first, before the deadline is aborted: the request was not written. */
  refused: () => void;
}

const PENDING = Symbol('otel-deadline.pending-write');
const WRAPPED = Symbol('otel-deadline.write-guard');

type GuardedSocket = Socket & { [PENDING]?: PendingWrite; [WRAPPED]?: true; _httpMessage?: unknown };

/** A cancellation (or an abort already recorded), with no second clock read for our own deadlines: remainingMs() has just read it. */
function abortedBesidesClock(deadline: Deadline): boolean {
  return deadline instanceof DeadlineNode ? deadline.abortedBesidesClock() : deadline.aborted;
}

/** Arms the check for the next `socket.write`, which carries the request line and headers. */
export function checkBeforeNextWrite(socket: Socket, pending: PendingWrite): void {
  const guarded = socket as GuardedSocket;
  guarded[PENDING] = pending;
  if (guarded[WRAPPED] === true) return;
  guarded[WRAPPED] = true;
  const write = guarded.write;
  guarded.write = function (this: GuardedSocket, ...args: unknown[]): boolean {
    const next = this[PENDING];
    // A node:http socket names the request it is writing for: a guard left by an earlier one is stale.
    if (next !== undefined && (this._httpMessage == null || this._httpMessage === next.owner)) {
      this[PENDING] = undefined;
      // Neither look aborts anything: the caller is told it was not written before the
      // abort reaches it, so the outcome says `expired`, not `unknown`.
      if (next.deadline.remainingMs() <= 0 || abortedBesidesClock(next.deadline)) {
        next.refused();
        next.abort(next.deadline.abortReason);
        return false;
      }
    }
    return (write as (...a: unknown[]) => boolean).apply(this, args);
  } as Socket['write'];
}

/** Disarms `owner`'s check if it is still armed: the request is over, and the socket may serve another. */
export function clearPendingWrite(socket: Socket, owner: object): void {
  const guarded = socket as GuardedSocket;
  if (guarded[PENDING]?.owner === owner) guarded[PENDING] = undefined;
}
