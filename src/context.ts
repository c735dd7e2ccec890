import { context, createContextKey, propagation, type Baggage, type Context } from '@opentelemetry/api';
import type { Deadline } from './deadline';
import { BAGGAGE_DEADLINE_KEY } from './attributes';
import { DeadlineOnlyBaggage } from './deadline-baggage';
import { dispatchingCall } from './dispatching-call';
import { OutgoingCallBaggage } from './outgoing-call-baggage';
import { parseIntegerMs } from './propagation/parse';

/**
 * Registered with Symbol.for so that two copies of this package (CJS and ESM,
 * or two versions) read and write the same context slot.
 */
const DEADLINE_KEY = Symbol.for('otel-deadline.context.deadline');

/** The deadline active in `ctx` (the current OTel context by default). */
export function getDeadline(ctx: Context = context.active()): Deadline | undefined {
  return deadlineIn(ctx);
}

/**
 * @internal getDeadline without the default: for the per-call paths, which
 * always hold a context. A third of getDeadline's bytecode is the default's
 * getter call, and TurboFan charges a function's whole bytecode against the
 * caller's inlining budget, which a driver wrapper runs out of.
 */
export function deadlineIn(ctx: Context): Deadline | undefined {
  return ctx.getValue(DEADLINE_KEY) as Deadline | undefined;
}

/**
 * Returns a context carrying `deadline`. It also records the cutoff as the
 * baggage entry `deadline.at_ms`, so a W3C baggage propagator composed after
 * ours still sends it, and the user's own entries are kept.
 */
export function setDeadline(ctx: Context, deadline: Deadline): Context {
  const atMs = Math.floor(deadline.expiresAtMs);
  const current = propagation.getBaggage(ctx);
  if (current === undefined) return setValueAndBaggage(ctx, DEADLINE_KEY, deadline, new DeadlineOnlyBaggage(atMs));
  // Baggage extracted from the same caller often holds this very cutoff already.
  if (isBaggageValueOf(current.getEntry(BAGGAGE_DEADLINE_KEY)?.value, atMs)) return ctx.setValue(DEADLINE_KEY, deadline);
  return setValueAndBaggage(ctx, DEADLINE_KEY, deadline, current.setEntry(BAGGAGE_DEADLINE_KEY, { value: String(atMs) }));
}

/**
 * True when `value` is exactly how String prints the whole number `ms`
 * (digits, no leading zero), compared without printing `ms`: see
 * DeadlineOnlyBaggage for what printing a 13-digit number costs.
 */
function isBaggageValueOf(value: string | undefined, ms: number): boolean {
  if (value === undefined || value.length === 0 || (value.charCodeAt(0) === 48 /* 0 */ && value.length > 1)) return false;
  return parseIntegerMs(value) === ms;
}

/** For setValueAndBaggage: remove the baggage instead of setting it. */
export const DELETE_BAGGAGE: unique symbol = Symbol('delete the baggage');

/**
 * @internal `ctx` with `key` set and its baggage set (or removed, with
 * DELETE_BAGGAGE), through the API only. It used to complete the API
 * context's copy in place (its private `_currentContext` Map) to save the
 * second copy; measured on the bench chain that saved no instructions that
 * repeated runs could tell apart from noise (docs/internals.md), so it went.
 */
export function setValueAndBaggage(ctx: Context, key: symbol, value: unknown, bag: Baggage | typeof DELETE_BAGGAGE): Context {
  const next = ctx.setValue(key, value);
  return bag === DELETE_BAGGAGE ? propagation.deleteBaggage(next) : propagation.setBaggage(next, bag);
}

/**
 * @internal `ctx` without any deadline: neither the slot nor the baggage
 * entry, so no propagator writes one from it.
 */
export function withoutDeadline(ctx: Context): Context {
  return withoutBaggageEntry(getDeadline(ctx) === undefined ? ctx : ctx.deleteValue(DEADLINE_KEY));
}

/** `ctx` without the `deadline.at_ms` baggage entry; the user's entries stay. */
function withoutBaggageEntry(ctx: Context): Context {
  const bag = propagation.getBaggage(ctx);
  if (bag?.getEntry(BAGGAGE_DEADLINE_KEY) === undefined) return ctx;
  return bag instanceof DeadlineOnlyBaggage ? propagation.deleteBaggage(ctx) : propagation.setBaggage(ctx, bag.removeEntry(BAGGAGE_DEADLINE_KEY));
}

/**
 * @internal The context key of the outgoing call a transport guard is making
 * (instrumentation/client/call.ts), read here for isWritingDeadlineHeaders.
 * One per copy of the package: a propagator of another copy does not see the
 * mark, and injects as it would anyway.
 */
export const OUTGOING_CALL_KEY = createContextKey('otel-deadline.outgoing-call');

/** @internal What the propagator asks of the call under OUTGOING_CALL_KEY. */
export interface DeadlineHeaderWriter {
  /** True while the call's transport builds a request whose deadline headers the guard has already put in it. */
  readonly writingDeadlineHeaders: boolean;
}

/**
 * @internal True while a transport guard dispatches a request it has already
 * put the deadline headers in: a propagator inside that transport
 * (instrumentation-undici's, through the global one) would only compute the
 * same headers again for them to be dropped as repeats.
 */
export function isWritingDeadlineHeaders(ctx: Context): boolean {
  const call = outgoingCallOf(ctx) as Partial<DeadlineHeaderWriter> | symbol | undefined;
  return typeof call === 'object' && call !== null && call.writingDeadlineHeaders === true;
}

/**
 * @internal The outgoing call `ctx` was made for: the value under
 * OUTGOING_CALL_KEY, else the call an OutgoingCallBaggage carries (see
 * withOutgoingCall), else the call runInCallTransport is dispatching. The key
 * wins: it is only ever set later than such a baggage, for a call made from
 * inside another call's transport, and a call dispatched inline is never
 * nested in one (mayDispatchInline).
 */
export function outgoingCallOf(ctx: Context): unknown {
  const value = ctx.getValue(OUTGOING_CALL_KEY);
  if (value !== undefined) return value;
  const bag = propagation.getBaggage(ctx);
  return bag instanceof OutgoingCallBaggage ? bag.call : dispatchingCall();
}

/**
 * @internal True when a call made under `ctx` may be dispatched with
 * runInCallTransport: `ctx` carries no call already (a key, a baggage standing
 * for one) and no off-wire mark an earlier call left, and no other dispatch
 * runs synchronously around this one. A nested call takes a transport
 * context, whose key wins over the call dispatched around it.
 */
export function mayDispatchInline(ctx: Context): boolean {
  return (
    dispatchingCall() === undefined &&
    ctx.getValue(OUTGOING_CALL_KEY) === undefined &&
    !isDeadlineOffWire(ctx) &&
    !(propagation.getBaggage(ctx) instanceof OutgoingCallBaggage)
  );
}

/**
 * @internal `ctx` for the transport of `call`, without baggage that holds only
 * the deadline entry (the call's headers carry it). When `ctx` has that
 * baggage and no outgoing call yet, one baggage stands for both changes: one
 * context copy instead of two (OutgoingCallBaggage).
 */
export function withOutgoingCall(ctx: Context, call: object): Context {
  const bag = propagation.getBaggage(ctx);
  if (!(bag instanceof DeadlineOnlyBaggage)) return ctx.setValue(OUTGOING_CALL_KEY, call);
  if (ctx.getValue(OUTGOING_CALL_KEY) === undefined) return propagation.setBaggage(ctx, new OutgoingCallBaggage(call));
  return setValueAndBaggage(ctx, OUTGOING_CALL_KEY, call, DELETE_BAGGAGE);
}

/** @internal `ctx` without any outgoing call (the key, or a baggage standing for it). */
export function withoutOutgoingCall(ctx: Context): Context {
  const cleared = ctx.getValue(OUTGOING_CALL_KEY) === undefined ? ctx : ctx.deleteValue(OUTGOING_CALL_KEY);
  return propagation.getBaggage(cleared) instanceof OutgoingCallBaggage ? propagation.deleteBaggage(cleared) : cleared;
}

/** Shared by every copy of the package, like DEADLINE_KEY. */
const OFF_WIRE_KEY = Symbol.for('otel-deadline.context.off-wire');

/**
 * @internal `ctx` whose deadline still holds here but is not sent on: the
 * DeadlinePropagator writes nothing from it and the baggage has no
 * `deadline.at_ms` entry (a W3C baggage propagator still sends the user's
 * own entries). For calls to hosts outside `propagateTo`.
 */
export function withDeadlineOffWire(ctx: Context): Context {
  return withoutBaggageEntry(ctx.setValue(OFF_WIRE_KEY, true));
}

/**
 * @internal `ctx` undoing withDeadlineOffWire: without its mark, and with the
 * baggage entry back. The mark is meant for the propagators inside the
 * transport of the call that set it, but it stays in every context made from
 * that one, such as the one node:http runs a response callback in. A call
 * made from there decides for itself whether its host gets the deadline
 * (`propagateTo`), and runs under this when it does.
 */
export function withDeadlineOnWire(ctx: Context): Context {
  if (!isDeadlineOffWire(ctx)) return ctx;
  const cleared = ctx.deleteValue(OFF_WIRE_KEY);
  const deadline = getDeadline(cleared);
  return deadline === undefined ? cleared : setDeadline(cleared, deadline);
}

/** @internal True for a context made by withDeadlineOffWire. */
export function isDeadlineOffWire(ctx: Context): boolean {
  return ctx.getValue(OFF_WIRE_KEY) === true;
}

/**
 * @internal True when `bag` holds no entry but `deadline.at_ms`: the
 * propagator then writes the header itself instead of running the codec.
 */
export function isDeadlineOnlyBaggage(bag: Baggage): boolean {
  if (bag instanceof DeadlineOnlyBaggage || bag instanceof OutgoingCallBaggage) return true;
  for (const [key] of bag.getAllEntries()) if (key !== BAGGAGE_DEADLINE_KEY) return false;
  return true;
}
