import { createContextKey, propagation, type Baggage, type Context } from '@opentelemetry/api';
import { DEADLINE_OFF_WIRE_KEY, getDeadline, setDeadline, withoutBaggageEntry } from '../../src/context';

/** The outgoing call being made (HTTP or gRPC), for the hooks that run inside its transport (request hooks, channels). */
export const CALL_KEY = createContextKey('otel-deadline outgoing call');

/** The value under CALL_KEY in `ctx`, if any. */
export function outgoingCallIn(ctx: Context): unknown {
  return ctx.getValue(CALL_KEY);
}

/** `ctx` whose deadline still holds but is not sent on (a host off `propagateTo`); the user's own baggage entries still go. */
export function withDeadlineOffWire(ctx: Context): Context {
  return withoutBaggageEntry(ctx.setValue(DEADLINE_OFF_WIRE_KEY, true));
}

/**
 * `ctx` for a transport whose request already carries the deadline headers and
 * baggage the guard wrote, and which appends what a propagator inside it
 * writes (undici's `addHeader`): no propagator there writes them a second time.
 */
export function withDeadlineWritten(ctx: Context): Context {
  const bag = propagation.getBaggage(ctx);
  // The mark holds the caller's baggage aside (each context entry set is a copy of the whole context).
  return bag === undefined ? ctx.setValue(DEADLINE_OFF_WIRE_KEY, true) : propagation.deleteBaggage(ctx.setValue(DEADLINE_OFF_WIRE_KEY, bag));
}

/**
 * `ctx` undoing withDeadlineOffWire or withDeadlineWritten, whose mark stays in
 * every context made from the call's (a node:http response callback): a call
 * made from there whose host gets the deadline runs under this.
 */
export function withDeadlineOnWire(ctx: Context): Context {
  const held = ctx.getValue(DEADLINE_OFF_WIRE_KEY);
  if (held === undefined) return ctx;
  let cleared = ctx.deleteValue(DEADLINE_OFF_WIRE_KEY);
  if (held !== true) cleared = propagation.setBaggage(cleared, held as Baggage);
  const deadline = getDeadline(cleared);
  return deadline === undefined ? cleared : setDeadline(cleared, deadline);
}
