// About the least work any implementation of the deadline contract must add to
// a workload, written as bare stand-ins rather than with the package, with
// OpenTelemetry's public API only (as the package must be): no validation, no
// abort handling beyond a timer, no observe mode, no lateness checks, no
// clamping, one header read. The instruction benches (bench/instructions.bench.mjs)
// count it on the same workloads as the plugin, to show what part of the
// plugin's cost the contract itself takes. The gRPC target is stated against
// it: the plugin's added instructions per unary call at most 1.3 times the floor's.
//
// Its pieces, wherever the workload has them:
// - outgoing (a propagator's inject): `x-deadline-remaining-ms` and
//   `x-deadline-at-ms`; because the deadline is also a baggage entry in the
//   caller's context, OTel's W3CBaggagePropagator writes
//   `baggage: deadline.at_ms=…`;
// - incoming (extract): read one header, put a deadline in the context (one
//   context entry) and, when the caller sent no `deadline.at_ms` baggage
//   entry, that entry too, so the hop's own calls carry it;
// - admission: work whose cutoff has passed is refused before it starts;
// - on each span under a deadline: the eight attributes a completed span
//   carries, written once at its end with `setAttributes`, and on server spans
//   (hop entries) one `deadline.remaining` histogram record;
// - work in flight must be cut at the cutoff: a timer per outgoing call,
//   cleared when it settles, set where the workload makes the call; an HTTP
//   call also gets the `signal` option, of an AbortController the timer would
//   abort (fetch can be cut through nothing else); a database statement joins
//   the set of its deadline's statements in flight (one timer per deadline)
//   from the driver instrumentation's request hook to its response hook;
// - a listener on each incoming call for the caller's cancellation (HTTP
//   `close`, gRPC `cancelled`), put on where the handler starts.
const DEADLINE = Symbol('contract-floor deadline');
const AT_MS = 'deadline.at_ms';
const noop = () => {};

function floorDeadline(remainingMs) {
  return { atMs: Date.now() + remainingMs, cutoff: performance.now() + remainingMs };
}

function withBaggageEntry(api, ctx, deadline) {
  const bag = api.propagation.getBaggage(ctx) ?? api.propagation.createBaggage();
  return api.propagation.setBaggage(ctx, bag.setEntry(AT_MS, { value: String(Math.floor(deadline.atMs)) }));
}

/** `ctx` under a deadline `budgetMs` from now: the context entry and the baggage entry. */
export function withFloorDeadline(api, ctx, budgetMs) {
  const deadline = floorDeadline(budgetMs);
  return withBaggageEntry(api, ctx.setValue(DEADLINE, deadline), deadline);
}

/** A TextMapPropagator for the two deadline headers (the baggage entry is the W3C propagator's); list it after W3CBaggagePropagator. */
export class FloorPropagator {
  constructor(api) {
    this.api = api;
  }

  inject(ctx, carrier, setter) {
    const deadline = ctx.getValue(DEADLINE);
    if (deadline === undefined) return;
    setter.set(carrier, 'x-deadline-remaining-ms', String(Math.floor(deadline.atMs - Date.now())));
    setter.set(carrier, 'x-deadline-at-ms', String(Math.floor(deadline.atMs)));
  }

  extract(ctx, carrier, getter) {
    // instrumentation-grpc's getter gives an array of the key's values, instrumentation-http's a string.
    const value = getter.get(carrier, 'x-deadline-remaining-ms');
    const remaining = Number(Array.isArray(value) ? value[0] : value);
    if (!(remaining >= 0)) return ctx;
    const deadline = floorDeadline(remaining);
    const withDeadline = ctx.setValue(DEADLINE, deadline);
    return this.api.propagation.getBaggage(ctx)?.getEntry(AT_MS) === undefined ? withBaggageEntry(this.api, withDeadline, deadline) : withDeadline;
  }

  fields() {
    return ['x-deadline-remaining-ms', 'x-deadline-at-ms'];
  }
}

/** The eight attributes at the end of each span under a deadline, and the histogram record on server spans. */
export class FloorSpanProcessor {
  constructor(api) {
    this.metrics = api.metrics;
    this.serverKind = api.SpanKind.SERVER;
    this.states = new WeakMap();
  }

  onStart(span, parentContext) {
    const deadline = parentContext.getValue(DEADLINE);
    if (deadline === undefined) return;
    const remaining = deadline.cutoff - performance.now();
    this.states.set(span, { deadline, remaining });
    if (span.kind !== this.serverKind) return;
    this.histogram ??= this.metrics.getMeterProvider().getMeter('contract-floor').createHistogram('deadline.remaining');
    this.histogram.record(remaining, { 'span.kind': 'server' }, parentContext);
  }

  onEnding(span) {
    const state = this.states.get(span);
    if (state === undefined) return;
    const left = state.deadline.cutoff - performance.now();
    span.setAttributes({
      'deadline.at_ms': Math.floor(state.deadline.atMs),
      'deadline.remaining_ms': Math.floor(state.remaining),
      'deadline.budget_ms': 5000,
      'deadline.source': 'remote',
      'deadline.operation': 'remote',
      'deadline.remaining_at_end_ms': Math.floor(left),
      'deadline.exceeded': left <= 0,
      'deadline.outcome': 'completed',
    });
  }

  onEnd() {}
  forceFlush() {
    return Promise.resolve();
  }
  shutdown() {
    return Promise.resolve();
  }
}

/** Per deadline: its statements in flight, and the one timer that would cut them. */
function statementsInFlight(deadline) {
  if (deadline.statements === undefined) {
    deadline.statements = new Set();
    setTimeout(() => deadline.statements.clear(), deadline.cutoff - performance.now()).unref();
  }
  return deadline.statements;
}

/**
 * A database statement's part, as the `requestHook` and `responseHook` of a
 * driver instrumentation (instrumentation-pg, -ioredis), which call them in
 * the caller's context as it hands the statement to the driver, and on the
 * reply. A hook cannot refuse a statement: the check is there for its cost.
 */
export function floorStatementHooks(api) {
  const watchedBy = new WeakMap();
  return {
    requestHook(span) {
      const deadline = api.context.active().getValue(DEADLINE);
      if (deadline === undefined || deadline.cutoff <= performance.now()) return;
      const statements = statementsInFlight(deadline);
      statements.add(span);
      watchedBy.set(span, statements);
    },
    responseHook(span) {
      watchedBy.get(span)?.delete(span);
    },
  };
}

/**
 * The per-call pieces outside OTel's hooks: the servers' handler wrappers
 * (refusing work whose cutoff has passed), and `startCall()` before an
 * outgoing call or statement, its cutoff timer if a deadline is active (or
 * `startSignalledCall()`, its timer and signal), with `endCall(timer)` when it settles.
 */
export function floorHooks(api) {
  const active = () => api.context.active().getValue(DEADLINE);
  const admit = () => {
    const deadline = active();
    return deadline === undefined || deadline.cutoff > performance.now();
  };
  return {
    /** A node:http request handler: admitted, and watched for the caller's going away. */
    serveHttp: (handler) => (req, res) => {
      if (!admit()) {
        res.writeHead(504).end();
        return undefined;
      }
      res.once('close', noop);
      return handler(req, res);
    },
    /** A unary gRPC handler: admitted, and watched for the caller's cancellation. */
    serveGrpc: (handler) => (call, callback) => {
      if (!admit()) return callback({ code: 4, details: 'deadline exceeded' });
      call.once('cancelled', noop);
      return handler(call, callback);
    },
    startCall() {
      const deadline = active();
      if (deadline === undefined) return undefined;
      const timer = setTimeout(noop, deadline.cutoff - performance.now());
      timer.unref();
      return timer;
    },
    /** An HTTP call's watch: `signal` for the call's options, `timer` for endCall. */
    startSignalledCall() {
      const deadline = active();
      if (deadline === undefined) return undefined;
      const controller = new AbortController();
      const timer = setTimeout(() => controller.abort(), deadline.cutoff - performance.now());
      timer.unref();
      return { signal: controller.signal, timer };
    },
    endCall: (timer) => clearTimeout(timer),
  };
}
