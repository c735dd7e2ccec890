/**
 * A database command guard marks its span's command in flight: ending without an error or own
 * outcome, it ends on the reply and is `completed` even just past the cutoff (ioredis ends it in
 * a wrapper above the guard's). On a cutoff, cancel or refusal the guard writes the outcome itself.
 */

/** What a processor keeps per span that a guard may mark. */
export interface InFlightMark {
  statementInFlight: boolean;
}

/** The span states of every processor that has not been shut down; usually one. */
const liveProcessors = new Set<WeakMap<object, InFlightMark>>();

export function addSpanStates(states: WeakMap<object, InFlightMark>): void {
  liveProcessors.add(states);
}

export function removeSpanStates(states: WeakMap<object, InFlightMark>): void {
  liveProcessors.delete(states);
}

/** Marks `span`'s statement in flight for every live processor; false when none tracks it (the guard then writes `completed`). */
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
