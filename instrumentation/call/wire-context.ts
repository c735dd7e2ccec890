import { createContextKey, propagation, type Baggage, type Context } from '@opentelemetry/api';
import { DEADLINE_OFF_WIRE_KEY, getDeadline, isDeadlineOffWire, setDeadline, withoutBaggageEntry } from '../../src/context';

/**
 * What the context a transport runs a guarded call in carries, shared by the
 * HTTP and gRPC clients: the call itself, for hooks inside the transport, and
 * whether the deadline may still be written there.
 */

/** The outgoing call being made, for the hooks that run inside its transport (request hooks, channels). */
export const CALL_KEY = createContextKey('otel-deadline outgoing call');

/** The value under CALL_KEY in `ctx`, if any. */
export function outgoingCallIn(ctx: Context): unknown {
  return ctx.getValue(CALL_KEY);
}

/** The caller's baggage, kept aside while withDeadlineWritten hides it from the propagators. */
const HELD_BAGGAGE_KEY = createContextKey('otel-deadline baggage held by the call');

/**
 * `ctx` whose deadline still holds here but is not sent on, for a call to a
 * host off `propagateTo`: the DeadlinePropagator writes nothing from it and
 * the baggage has no `deadline.at_ms` entry (a W3C baggage propagator still
 * sends the user's own entries).
 */
export function withDeadlineOffWire(ctx: Context): Context {
  return withoutBaggageEntry(ctx.setValue(DEADLINE_OFF_WIRE_KEY, true));
}

/**
 * `ctx` for a transport whose request already carries every deadline header
 * and the baggage (the user's entries with ours) that the guard wrote, and
 * which appends whatever a propagator inside it writes (undici's `addHeader`
 * in `undici:request:create`, where instrumentation-undici injects): no
 * propagator there writes the deadline or the baggage a second time.
 */
export function withDeadlineWritten(ctx: Context): Context {
  const marked = ctx.setValue(DEADLINE_OFF_WIRE_KEY, true);
  const bag = propagation.getBaggage(ctx);
  return bag === undefined ? marked : propagation.deleteBaggage(marked.setValue(HELD_BAGGAGE_KEY, bag));
}

/**
 * `ctx` undoing withDeadlineOffWire or withDeadlineWritten. The mark is meant
 * for the propagators inside the transport of the call that set it, but it
 * stays in every context made from that one, such as the one node:http runs
 * a response callback in. A call made from there decides for itself whether
 * its host gets the deadline (`propagateTo`), and runs under this when it does.
 */
export function withDeadlineOnWire(ctx: Context): Context {
  if (!isDeadlineOffWire(ctx)) return ctx;
  let cleared = ctx.deleteValue(DEADLINE_OFF_WIRE_KEY);
  const held = ctx.getValue(HELD_BAGGAGE_KEY) as Baggage | undefined;
  if (held !== undefined) cleared = propagation.setBaggage(cleared.deleteValue(HELD_BAGGAGE_KEY), held);
  const deadline = getDeadline(cleared);
  return deadline === undefined ? cleared : setDeadline(cleared, deadline);
}
