// About the least work any implementation of the deadline contract must add
// to the bench:grpc workload (bench/grpc-workload.mjs), written as bare
// stand-ins rather than with the package: no validation, no abort handling,
// no observe mode, no lateness checks, no refusal, no clamping, one metadata
// read instead of several. It answers one question, the gRPC counterpart of
// bench/contract-floor.mjs: how much of the plugin's cost on unary gRPC calls
// is the contract itself, whoever implements it.
//
// Per call that is:
// - client inject (instrumentation-grpc calls the global propagator on the
//   call's metadata): `x-deadline-remaining-ms` and `x-deadline-at-ms`, and,
//   because the deadline is also a baggage entry in the caller's context,
//   OTel's W3CBaggagePropagator writes `baggage: deadline.at_ms=…`;
// - server extract: read one header and put a deadline in the context (one
//   context entry; the W3C baggage propagator parses the `baggage` header
//   into the other);
// - on the client span and the server span: the eight attributes a completed
//   span carries, written once at its end straight into the SDK span's
//   attribute map (the cheapest write there is, as in the HTTP floor);
//   on the server span only (the hop entry) one `deadline.remaining`
//   histogram record;
// - a timer per outgoing call, cleared when it settles (an in-flight call
//   must be cut at the cutoff), set where the workload makes the call: the
//   timer's own cost, without the cost of any hook (an interceptor or a
//   patch) an implementation needs to reach the call;
// - a 'cancelled' listener on each server call (a caller's cancellation must
//   cancel the work), likewise put on where the handler starts.
//
// Each piece can be left out (`omit`, a set read on every call), so that the
// instruction benchmark can price it as the difference from the whole floor
// (bench/grpc-instructions.bench.mjs):
// - 'histogram': no histogram record;
// - 'headers': inject writes neither `x-deadline-*` header (the server then
//   takes its deadline from a constant instead of the wire: same spans, same
//   attributes, no header work);
// - 'baggage': no `deadline.at_ms` baggage entry in the caller's context, so
//   no `baggage` header (no serialize, no parse, no Baggage on the server);
// - 'attributes': no per-span state and no attribute writes;
// - 'timer': no timer per outgoing call;
// - 'cancel': no 'cancelled' listener per server call;
// - 'context': the deadline kept in a module variable instead of an OTel
//   context entry (wrong under concurrency; only to price the entry).
import { FloorSpanProcessor } from './contract-floor.mjs';

const DEADLINE = Symbol('grpc-contract-floor deadline');
/** Where the deadline goes when the 'context' piece is left out. */
let outsideContext;

export const GRPC_FLOOR_PIECES = Object.freeze(['headers', 'baggage', 'attributes', 'histogram', 'timer', 'cancel', 'context']);

function deadlineIn(ctx, omit) {
  return omit.has('context') ? outsideContext : ctx.getValue(DEADLINE);
}

/**
 * `ctx` under a deadline `budgetMs` from now: the context entry and the
 * `deadline.at_ms` baggage entry the W3C baggage propagator writes. Set once
 * per batch, as the workload's other modes open one deadline per batch.
 */
export function withFloorDeadline(api, ctx, budgetMs, omit = new Set()) {
  const deadline = { atMs: Date.now() + budgetMs, cutoff: performance.now() + budgetMs };
  let next = ctx;
  if (omit.has('context')) outsideContext = deadline;
  else next = next.setValue(DEADLINE, deadline);
  if (omit.has('baggage')) return next;
  const bag = api.propagation.createBaggage({ 'deadline.at_ms': { value: String(Math.floor(deadline.atMs)) } });
  return api.propagation.setBaggage(next, bag);
}

/** A TextMapPropagator for the two deadline headers and nothing else (the baggage entry is the W3C propagator's). */
export class GrpcFloorPropagator {
  constructor(omit = new Set()) {
    this.omit = omit;
  }

  inject(ctx, carrier, setter) {
    const deadline = deadlineIn(ctx, this.omit);
    if (deadline === undefined || this.omit.has('headers')) return;
    setter.set(carrier, 'x-deadline-remaining-ms', String(Math.floor(deadline.atMs - Date.now())));
    setter.set(carrier, 'x-deadline-at-ms', String(Math.floor(deadline.atMs)));
  }

  extract(ctx, carrier, getter) {
    // Without headers on the wire, the server still runs under a deadline (see 'headers').
    // instrumentation-grpc's getter gives an array of the key's values.
    const remaining = this.omit.has('headers') ? 5000 : Number(getter.get(carrier, 'x-deadline-remaining-ms')?.[0]);
    if (!(remaining >= 0)) return ctx;
    const deadline = { atMs: Date.now() + remaining, cutoff: performance.now() + remaining };
    if (!this.omit.has('context')) return ctx.setValue(DEADLINE, deadline);
    outsideContext = deadline;
    return ctx;
  }

  fields() {
    return ['x-deadline-remaining-ms', 'x-deadline-at-ms'];
  }
}

/**
 * The eight attributes at a span's end for spans under a deadline (the HTTP
 * floor's onEnding, inherited), and the histogram record on the server span
 * only: the hop entry, as the HTTP floor's 'client-histogram' omission.
 */
export class GrpcFloorSpanProcessor extends FloorSpanProcessor {
  onStart(span, parentContext) {
    const deadline = deadlineIn(parentContext, this.omit);
    if (deadline === undefined) return;
    const remaining = deadline.cutoff - performance.now();
    if (!this.omit.has('attributes')) span[this.stateKey] = { deadline, remaining };
    if (this.omit.has('histogram') || !this.entryKinds.has(span.kind)) return;
    this.histogram ??= this.metrics.getMeterProvider().getMeter('grpc-contract-floor').createHistogram('deadline.remaining');
    this.histogram.record(remaining, this.kinds[span.kind], parentContext);
  }
}

/** The per-call pieces outside OTel's hooks: a 'cancelled' listener per server call, a timer per outgoing call. */
export function grpcFloorHooks(api, omit = new Set()) {
  const noop = () => {};
  return {
    /** Wraps a unary handler. */
    serve: (handler) => (call, callback) => {
      if (!omit.has('cancel')) call.once('cancelled', noop);
      return handler(call, callback);
    },
    /** Before an outgoing call: its cutoff timer, if a deadline is active. */
    startCall() {
      const deadline = omit.has('timer') ? undefined : deadlineIn(api.context.active(), omit);
      if (deadline === undefined) return undefined;
      const timer = setTimeout(noop, deadline.cutoff - performance.now());
      timer.unref();
      return timer;
    },
    endCall: (timer) => clearTimeout(timer),
  };
}
