import { context, propagation, type Context } from '@opentelemetry/api';
import type { Deadline } from './deadline';
import { BAGGAGE_DEADLINE_KEY } from './attributes';

/** Symbol.for, so two copies of this package share one context slot. */
const DEADLINE_KEY = Symbol.for('otel-deadline.context.deadline');

/** The deadline active in `ctx` (the current OTel context by default). */
export function getDeadline(ctx: Context = context.active()): Deadline | undefined {
  return deadlineIn(ctx);
}

/** @internal getDeadline of a given context, for the per-call paths. */
export function deadlineIn(ctx: Context): Deadline | undefined {
  return ctx.getValue(DEADLINE_KEY) as Deadline | undefined;
}

/** A context carrying `deadline`, its cutoff also in the baggage entry `deadline.at_ms` (other entries kept). */
export function setDeadline(ctx: Context, deadline: Deadline): Context {
  const atMs = String(Math.floor(deadline.expiresAtMs));
  const current = propagation.getBaggage(ctx);
  const withDeadline = ctx.setValue(DEADLINE_KEY, deadline);
  // Baggage extracted from the same caller often holds this very cutoff already.
  if (current?.getEntry(BAGGAGE_DEADLINE_KEY)?.value === atMs) return withDeadline;
  const bag = (current ?? propagation.createBaggage()).setEntry(BAGGAGE_DEADLINE_KEY, { value: atMs });
  return propagation.setBaggage(withDeadline, bag);
}

/** @internal `ctx` without any deadline: neither the slot nor the baggage entry. */
export function withoutDeadline(ctx: Context): Context {
  return withoutBaggageEntry(getDeadline(ctx) === undefined ? ctx : ctx.deleteValue(DEADLINE_KEY));
}

/** @internal `ctx` without the `deadline.at_ms` baggage entry; the user's entries stay. */
export function withoutBaggageEntry(ctx: Context): Context {
  const bag = propagation.getBaggage(ctx);
  if (bag?.getEntry(BAGGAGE_DEADLINE_KEY) === undefined) return ctx;
  const rest = bag.removeEntry(BAGGAGE_DEADLINE_KEY);
  return rest.getAllEntries().length === 0 ? propagation.deleteBaggage(ctx) : propagation.setBaggage(ctx, rest);
}

/** @internal Marks a context whose deadline the DeadlinePropagator must not send (`true`, or the baggage a call holds aside); shared across package copies. */
export const DEADLINE_OFF_WIRE_KEY = Symbol.for('otel-deadline.context.off-wire');

/** @internal True for a context carrying DEADLINE_OFF_WIRE_KEY. */
export function isDeadlineOffWire(ctx: Context): boolean {
  return ctx.getValue(DEADLINE_OFF_WIRE_KEY) !== undefined;
}
