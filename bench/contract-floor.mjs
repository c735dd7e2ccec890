// About the least work any implementation of the deadline contract must add
// to the bench:http chain, written as bare stand-ins rather than with the
// package: no validation, no abort handling, no observe mode, no lateness
// checks, no refusal, one header read instead of six. It answers one
// question: how much of the plugin's cost on this chain is the contract
// itself, whoever implements it.
//
// Per request that is:
// - extract at each hop: read the header and put a deadline in the context
//   (one context entry; a W3C baggage propagator also parses the `baggage`
//   header the contract puts on the wire);
// - inject on the hop between them: the three headers the contract names;
// - on every span started under the deadline: the `deadline.remaining`
//   histogram record with its span-kind attribute (issue 2), and the eight
//   attributes a completed span carries, written once at its end, straight
//   into the SDK span's attribute map;
// - a timer for the outgoing call, cleared when it settles (an in-flight call
//   must be aborted at the cutoff);
// - a 'close' listener on each server response (a caller's disconnect must
//   cancel the work).
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

const DEADLINE = Symbol('contract-floor deadline');

/** A TextMapPropagator that carries a cutoff and nothing else. */
export class FloorPropagator {
  inject(ctx, carrier, setter) {
    const deadline = ctx.getValue(DEADLINE);
    if (deadline === undefined) return;
    const atMs = String(Math.floor(deadline.atMs));
    setter.set(carrier, 'x-deadline-remaining-ms', String(Math.floor(deadline.atMs - Date.now())));
    setter.set(carrier, 'x-deadline-at-ms', atMs);
    setter.set(carrier, 'baggage', `deadline.at_ms=${atMs}`);
  }

  extract(ctx, carrier, getter) {
    const remaining = Number(getter.get(carrier, 'x-deadline-remaining-ms'));
    if (!(remaining >= 0)) return ctx;
    return ctx.setValue(DEADLINE, { atMs: Date.now() + remaining, cutoff: performance.now() + remaining });
  }

  fields() {
    return ['x-deadline-remaining-ms', 'x-deadline-at-ms', 'baggage'];
  }
}

/** The histogram record at start and the eight end attributes, for spans under a deadline. */
export class FloorSpanProcessor {
  constructor() {
    const { metrics, SpanKind } = require('@opentelemetry/api');
    this.kinds = { [SpanKind.SERVER]: { 'span.kind': 'server' }, [SpanKind.CLIENT]: { 'span.kind': 'client' }, [SpanKind.INTERNAL]: { 'span.kind': 'internal' } };
    this.metrics = metrics;
    this.stateKey = Symbol('contract-floor span');
  }

  onStart(span, parentContext) {
    const deadline = parentContext.getValue(DEADLINE);
    if (deadline === undefined) return;
    const remaining = deadline.cutoff - performance.now();
    span[this.stateKey] = { deadline, remaining };
    this.histogram ??= this.metrics.getMeterProvider().getMeter('contract-floor').createHistogram('deadline.remaining');
    this.histogram.record(remaining, this.kinds[span.kind] ?? this.kinds[0], parentContext);
  }

  onEnding(span) {
    const state = span[this.stateKey];
    if (state === undefined) return;
    const left = state.deadline.cutoff - performance.now();
    // Named stores straight into the SDK span's attribute map, the cheapest
    // write there is (setAttribute's keyed stores cost more on a span this size).
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

/** The per-request pieces outside OTel's hooks: a 'close' listener per response, a timer per outgoing call. */
export function floorHooks(api) {
  const noop = () => {};
  return {
    /** Wraps a request listener. */
    serve: (handler) => (req, res) => {
      res.once('close', noop);
      return handler(req, res);
    },
    /** Before an outgoing call: its abort timer, if a deadline is active. */
    startCall() {
      if (api.context.active().getValue(DEADLINE) === undefined) return undefined;
      const timer = setTimeout(noop, 5000);
      timer.unref();
      return timer;
    },
    endCall: (timer) => clearTimeout(timer),
  };
}
