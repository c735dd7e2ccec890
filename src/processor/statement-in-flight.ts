/**
 * How a database command guard tells DeadlineSpanProcessor that the span it
 * covers belongs to a command that is still in flight, not cut: when such a
 * span ends without an error status and without an outcome of its own, it is
 * ending on the command's reply, and its outcome is `completed` whatever the
 * clock says. That matters when the reply is read after the cutoff instant but
 * before the cutoff's timer ran: the caller gets the result, and the span must
 * not read `expired`. instrumentation-ioredis ends its span in a reply wrapper
 * on top of the guard's, so the guard cannot write the outcome itself in time.
 * The guard settles first on a cutoff, a cancellation or a refusal and writes
 * that outcome itself, which a processor never overrides.
 */

/** What a processor keeps per span that a guard may mark. */
export interface InFlightMark {
  statementInFlight: boolean;
}

/** The span states of every processor that has not been shut down; usually one. */
const liveProcessors = new Set<WeakMap<object, InFlightMark>>();

/** A processor's span states become markable when it is made, and stop being so at its shutdown. */
export function addSpanStates(states: WeakMap<object, InFlightMark>): void {
  liveProcessors.add(states);
}

export function removeSpanStates(states: WeakMap<object, InFlightMark>): void {
  liveProcessors.delete(states);
}

/**
 * Marks `span`'s statement as in flight in the state of every live processor
 * that keeps one for it. False when none does (no DeadlineSpanProcessor saw
 * the span start under a deadline): the guard then writes `completed` on the
 * span itself.
 */
export function markStatementInFlight(span: object): boolean {
  let marked = false;
  for (const states of liveProcessors) {
    const state = states.get(span);
    if (state !== undefined) {
      state.statementInFlight = true;
      marked = true;
    }
  }
  return marked;
}
