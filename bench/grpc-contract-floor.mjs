// About the least work any implementation of the deadline contract must add
// to the bench:grpc workload (bench/grpc-workload.mjs), written as bare
// stand-ins rather than with the package: no validation, no abort handling,
// no observe mode, no lateness checks, no refusal, no clamping, one metadata
// read. The gRPC target is stated against it: the plugin's added instructions
// per unary call at most 1.3 times the floor's.
//
// Per call that is:
// - client inject (instrumentation-grpc calls the global propagator on the
//   call's metadata): `x-deadline-remaining-ms` and `x-deadline-at-ms`, and,
//   because the deadline is also a baggage entry in the caller's context,
//   OTel's W3CBaggagePropagator writes `baggage: deadline.at_ms=…`;
// - server extract: read one header and put a deadline in the context (one
//   context entry; the W3C baggage propagator parses the `baggage` header);
// - on the client span and the server span: the eight attributes a completed
//   span carries, written once at its end straight into the SDK span's
//   attribute map (the cheapest write there is; the package itself goes
//   through the SDK's API), and on the server span (the hop entry) one
//   `deadline.remaining` histogram record;
// - a timer per outgoing call, cleared when it settles (an in-flight call
//   must be cut at the cutoff), set where the workload makes the call;
// - a 'cancelled' listener on each server call (a caller's cancellation must
//   cancel the work), put on where the handler starts.
const DEADLINE = Symbol('grpc-contract-floor deadline');

/**
 * `ctx` under a deadline `budgetMs` from now: the context entry and the
 * `deadline.at_ms` baggage entry the W3C baggage propagator writes. Set once
 * per batch, as the workload's other modes open one deadline per batch.
 */
export function withFloorDeadline(api, ctx, budgetMs) {
  const deadline = { atMs: Date.now() + budgetMs, cutoff: performance.now() + budgetMs };
  const bag = api.propagation.createBaggage({ 'deadline.at_ms': { value: String(Math.floor(deadline.atMs)) } });
  return api.propagation.setBaggage(ctx.setValue(DEADLINE, deadline), bag);
}

/** A TextMapPropagator for the two deadline headers and nothing else (the baggage entry is the W3C propagator's). */
export class GrpcFloorPropagator {
  inject(ctx, carrier, setter) {
    const deadline = ctx.getValue(DEADLINE);
    if (deadline === undefined) return;
    setter.set(carrier, 'x-deadline-remaining-ms', String(Math.floor(deadline.atMs - Date.now())));
    setter.set(carrier, 'x-deadline-at-ms', String(Math.floor(deadline.atMs)));
  }

  extract(ctx, carrier, getter) {
    // instrumentation-grpc's getter gives an array of the key's values.
    const remaining = Number(getter.get(carrier, 'x-deadline-remaining-ms')?.[0]);
    if (!(remaining >= 0)) return ctx;
    return ctx.setValue(DEADLINE, { atMs: Date.now() + remaining, cutoff: performance.now() + remaining });
  }

  fields() {
    return ['x-deadline-remaining-ms', 'x-deadline-at-ms'];
  }
}

/** The eight attributes at the end of each span under a deadline, and the histogram record on server spans. */
export class GrpcFloorSpanProcessor {
  constructor(api) {
    this.metrics = api.metrics;
    this.serverKind = api.SpanKind.SERVER;
    this.stateKey = Symbol('grpc-contract-floor span');
  }

  onStart(span, parentContext) {
    const deadline = parentContext.getValue(DEADLINE);
    if (deadline === undefined) return;
    const remaining = deadline.cutoff - performance.now();
    span[this.stateKey] = { deadline, remaining };
    if (span.kind !== this.serverKind) return;
    this.histogram ??= this.metrics.getMeterProvider().getMeter('grpc-contract-floor').createHistogram('deadline.remaining');
    this.histogram.record(remaining, { 'span.kind': 'server' }, parentContext);
  }

  onEnding(span) {
    const state = span[this.stateKey];
    if (state === undefined) return;
    const left = state.deadline.cutoff - performance.now();
    const attributes = span.attributes;
    attributes['deadline.at_ms'] = Math.floor(state.deadline.atMs);
    attributes['deadline.remaining_ms'] = Math.floor(state.remaining);
    attributes['deadline.budget_ms'] = 5000;
    attributes['deadline.source'] = 'remote';
    attributes['deadline.operation'] = 'remote';
    attributes['deadline.remaining_at_end_ms'] = Math.floor(left);
    attributes['deadline.exceeded'] = left <= 0;
    attributes['deadline.outcome'] = 'completed';
    span._attributesCount += 8;
  }

  onEnd() {}
  forceFlush() {
    return Promise.resolve();
  }
  shutdown() {
    return Promise.resolve();
  }
}

/** The per-call pieces outside OTel's hooks: a 'cancelled' listener per server call, a timer per outgoing call. */
export function grpcFloorHooks(api) {
  const noop = () => {};
  return {
    /** Wraps a unary handler. */
    serve: (handler) => (call, callback) => {
      call.once('cancelled', noop);
      return handler(call, callback);
    },
    /** Before an outgoing call: its cutoff timer, if a deadline is active. */
    startCall() {
      const deadline = api.context.active().getValue(DEADLINE);
      if (deadline === undefined) return undefined;
      const timer = setTimeout(noop, deadline.cutoff - performance.now());
      timer.unref();
      return timer;
    },
    endCall: (timer) => clearTimeout(timer),
  };
}
