import type { Deadline } from '../deadline';

/**
 * How a database command guard tells DeadlineSpanProcessor that the span it
 * covers belongs to a command that is still in flight, not cut: when such a
 * span ends without an error status and without an outcome of its own, it is
 * ending on the command's reply, and its outcome is `completed` whatever the
 * clock says. That matters when the reply is read after the cutoff instant but
 * before the cutoff's timer ran: the caller gets the result, and the span must
 * not read `expired`. The guard settles first on a cutoff, a cancellation or a
 * refusal and writes that outcome itself, which a processor never overrides.
 *
 * Without this the guard had to write `completed` on the span before the span
 * ended, so it had to put its reply wrapper on top of instrumentation-ioredis's
 * (a microtask per batch of commands when that instrumentation wraps on top of
 * ours) and write one attribute per command: about 1,800 instructions of the
 * guard's 3,100 per Redis GET (bench:db:instructions).
 *
 * The processors' state keys are kept on globalThis, as started-spans.ts keeps
 * its listeners, so that a guard and a processor loaded from two copies of this
 * package still meet. A processor adds its key when it is made and removes it
 * at shutdown; usually there is one.
 */
const KEY = Symbol.for('otel-deadline.span-state-keys');
const store = globalThis as { [KEY]?: symbol[] };
const stateKeys: symbol[] = (store[KEY] ??= []);

/** The fields of a processor's span state that a guard reads and sets. */
export interface StatementInFlightState {
  statementInFlight: boolean;
  /** The deadline the span started under; undefined once the span has ended. */
  deadline: Deadline | undefined;
  /**
   * The ms the processor found left when the span started (its one clock
   * read), or 0 when the deadline had expired or aborted then. Undefined in
   * the state of a processor from an older copy of this package.
   */
  startBudgetLeftMs: number | undefined;
}

/**
 * What a DeadlineSpanProcessor saw as `span` started: the state of the first
 * processor that keeps one for it, or undefined. A driver instrumentation
 * starts its span and calls its requestHook in the one synchronous step that
 * then calls the guard's wrapper, in the same context: the processor's look at
 * the deadline (deadlineIn and a clock read) then stands for the guard's own,
 * which costs a context read and a clock read per command otherwise.
 */
export function spanStartLook(span: object): StatementInFlightState | undefined {
  for (let i = 0; i < stateKeys.length; i++) {
    const state = (span as { [key: symbol]: StatementInFlightState | undefined })[stateKeys[i]!];
    if (state !== undefined) return state;
  }
  return undefined;
}

export function addSpanStateKey(key: symbol): void {
  if (!stateKeys.includes(key)) stateKeys.push(key);
}

export function removeSpanStateKey(key: symbol): void {
  const index = stateKeys.indexOf(key);
  if (index >= 0) stateKeys.splice(index, 1);
}

/**
 * Marks `span`'s statement as in flight in the state of every processor that
 * keeps one for it. False when none does (no DeadlineSpanProcessor saw the
 * span start under a deadline, or the span could not take its state): the
 * guard then writes `completed` on the span itself.
 */
export function markStatementInFlight(span: object): boolean {
  let marked = false;
  for (let i = 0; i < stateKeys.length; i++) {
    const state = (span as { [key: symbol]: StatementInFlightState | undefined })[stateKeys[i]!];
    if (state !== undefined) {
      state.statementInFlight = true;
      marked = true;
    }
  }
  return marked;
}
