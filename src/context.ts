import { context, createContextKey, propagation, type Baggage, type Context } from '@opentelemetry/api';
import type { Deadline } from './deadline';
import { BAGGAGE_DEADLINE_KEY } from './attributes';
import { DeadlineOnlyBaggage } from './deadline-baggage';

/**
 * Registered with Symbol.for so that two copies of this package (CJS and ESM,
 * or two versions) read and write the same context slot.
 */
const DEADLINE_KEY = Symbol.for('otel-deadline.context.deadline');

/**
 * @internal Where DeadlineInstrumentation marks the context it runs an
 * outgoing call in: the call object when it guards the call, a symbol when
 * config excluded it. A guarded call has its deadline headers written by the
 * instrumentation already, from the caller's context; an excluded one must
 * not get any.
 */
export const OUTGOING_CALL_KEY = createContextKey('otel-deadline.outgoing-call');

/**
 * @internal True inside an outgoing call DeadlineInstrumentation has decided
 * on (see OUTGOING_CALL_KEY): it wrote the headers of a guarded call, and an
 * excluded call gets none.
 */
export function isInstrumentedCall(ctx: Context): boolean {
  return ctx.getValue(OUTGOING_CALL_KEY) !== undefined;
}

/** The deadline active in `ctx` (the current OTel context by default). */
export function getDeadline(ctx: Context = context.active()): Deadline | undefined {
  return ctx.getValue(DEADLINE_KEY) as Deadline | undefined;
}

/**
 * Returns a context carrying `deadline`. It also records the cutoff as the
 * baggage entry `deadline.at_ms`, so a W3C baggage propagator composed after
 * ours still sends it, and the user's own entries are kept.
 */
export function setDeadline(ctx: Context, deadline: Deadline): Context {
  const atMs = String(Math.floor(deadline.expiresAtMs));
  const current = propagation.getBaggage(ctx);
  const bag = current === undefined ? new DeadlineOnlyBaggage(atMs) : current.setEntry(BAGGAGE_DEADLINE_KEY, { value: atMs });
  return propagation.setBaggage(ctx.setValue(DEADLINE_KEY, deadline), bag);
}

/**
 * @internal True when `bag` holds no entry but `deadline.at_ms`: the
 * propagator then writes the header itself instead of running the codec.
 */
export function isDeadlineOnlyBaggage(bag: Baggage): boolean {
  if (bag instanceof DeadlineOnlyBaggage) return true;
  for (const [key] of bag.getAllEntries()) if (key !== BAGGAGE_DEADLINE_KEY) return false;
  return true;
}
