import type { Socket } from 'node:net';
import type { Deadline } from '../../src/deadline';
import { DeadlineNode } from '../../src/deadline-node';

/**
 * The last look at the clock before a guarded request's first bytes go to its
 * socket. The transports check the deadline before they build the request's
 * headers, and a GC pause in that build can outlast the cutoff; checking inside
 * `socket.write` leaves no such gap. `write` is wrapped once, on the socket
 * (a public method; the class is untouched), and armed for the next write only.
 */

/** If `owner`'s next write comes after the cutoff: `refused()` (it was not written), then `abort(reason)` instead of the write. */
interface PendingWrite {
  owner: object;
  deadline: Deadline;
  abort: (reason: unknown) => void;
  refused: () => void;
}

const PENDING = Symbol('otel-deadline.pending-write');
const WRAPPED = Symbol('otel-deadline.write-guard');

type GuardedSocket = Socket & { [PENDING]?: PendingWrite; [WRAPPED]?: true; _httpMessage?: unknown };

/** A cancellation or an abort already recorded; remainingMs() has just read the clock. */
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
      // The caller learns it was not written before the abort reaches it: `expired`, not `unknown`.
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
