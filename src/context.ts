import { context, propagation, type Baggage, type Context } from '@opentelemetry/api';
import type { Deadline } from './deadline';
import { BAGGAGE_DEADLINE_KEY } from './attributes';
import { DeadlineOnlyBaggage } from './deadline-baggage';

/**
 * Registered with Symbol.for so that two copies of this package (CJS and ESM,
 * or two versions) read and write the same context slot.
 */
const DEADLINE_KEY = Symbol.for('otel-deadline.context.deadline');

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
 * @internal `ctx` without any deadline: neither the slot nor the baggage
 * entry, so no propagator writes one from it.
 */
export function withoutDeadline(ctx: Context): Context {
  const stripped = getDeadline(ctx) === undefined ? ctx : ctx.deleteValue(DEADLINE_KEY);
  const bag = propagation.getBaggage(stripped);
  if (bag?.getEntry(BAGGAGE_DEADLINE_KEY) === undefined) return stripped;
  return bag instanceof DeadlineOnlyBaggage ? propagation.deleteBaggage(stripped) : propagation.setBaggage(stripped, bag.removeEntry(BAGGAGE_DEADLINE_KEY));
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
