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
//
// Each piece can be left out (`omit`, a set read on every request), so that
// the instruction benchmark can price it as the difference from the whole
// floor (bench/http-instructions):
// - 'histogram': no histogram record at all;
// - 'client-histogram': the record on hop-entry spans (server, consumer) only;
// - 'headers': inject writes none of the three headers (the next hop then
//   takes its deadline from a constant instead of the wire: same spans, same
//   attributes, no header work);
// - 'baggage': inject writes no `baggage` header (no serialize, no parse);
// - 'attributes': no per-span state and no attribute writes;
// - 'timer': no timer per outgoing call;
// - 'close': no 'close' listener per response;
// - 'context': the deadline kept in a module variable instead of an OTel
//   context entry (wrong under concurrency; only to price the entry).
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

const DEADLINE = Symbol('contract-floor deadline');
/** Where the deadline goes when the 'context' piece is left out. */
let outsideContext;

export const FLOOR_PIECES = Object.freeze(['histogram', 'client-histogram', 'headers', 'baggage', 'attributes', 'timer', 'close', 'context']);

function deadlineIn(ctx, omit) {
  return omit.has('context') ? outsideContext : ctx.getValue(DEADLINE);
}

/** A TextMapPropagator that carries a cutoff and nothing else. */
export class FloorPropagator {
  constructor(omit = new Set()) {
    this.omit = omit;
  }

  inject(ctx, carrier, setter) {
    const deadline = deadlineIn(ctx, this.omit);
    if (deadline === undefined || this.omit.has('headers')) return;
    const atMs = String(Math.floor(deadline.atMs));
    setter.set(carrier, 'x-deadline-remaining-ms', String(Math.floor(deadline.atMs - Date.now())));
    setter.set(carrier, 'x-deadline-at-ms', atMs);
    if (!this.omit.has('baggage')) setter.set(carrier, 'baggage', `deadline.at_ms=${atMs}`);
  }

  extract(ctx, carrier, getter) {
    // Without headers on the wire, the hop behind still runs under a deadline (see 'headers').
    const remaining = this.omit.has('headers') ? 5000 : Number(getter.get(carrier, 'x-deadline-remaining-ms'));
    if (!(remaining >= 0)) return ctx;
    const deadline = { atMs: Date.now() + remaining, cutoff: performance.now() + remaining };
    if (!this.omit.has('context')) return ctx.setValue(DEADLINE, deadline);
    outsideContext = deadline;
    return ctx;
  }

  fields() {
    return ['x-deadline-remaining-ms', 'x-deadline-at-ms', 'baggage'];
  }
}

/** The histogram record at start and the eight end attributes, for spans under a deadline. */
export class FloorSpanProcessor {
  constructor(omit = new Set()) {
    const { metrics, SpanKind } = require('@opentelemetry/api');
    this.omit = omit;
    this.kinds = { [SpanKind.SERVER]: { 'span.kind': 'server' }, [SpanKind.CLIENT]: { 'span.kind': 'client' }, [SpanKind.INTERNAL]: { 'span.kind': 'internal' } };
    this.entryKinds = new Set([SpanKind.SERVER, SpanKind.CONSUMER]);
    this.metrics = metrics;
    this.stateKey = Symbol('contract-floor span');
  }

  onStart(span, parentContext) {
    const deadline = deadlineIn(parentContext, this.omit);
    if (deadline === undefined) return;
    const remaining = deadline.cutoff - performance.now();
    if (!this.omit.has('attributes')) span[this.stateKey] = { deadline, remaining };
    if (this.omit.has('histogram') || (this.omit.has('client-histogram') && !this.entryKinds.has(span.kind))) return;
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
export function floorHooks(api, omit = new Set()) {
  const noop = () => {};
  return {
    /** Wraps a request listener. */
    serve: (handler) => (req, res) => {
      if (!omit.has('close')) res.once('close', noop);
      return handler(req, res);
    },
    /** Before an outgoing call: its abort timer, if a deadline is active. */
    startCall() {
      if (omit.has('timer') || deadlineIn(api.context.active(), omit) === undefined) return undefined;
      const timer = setTimeout(noop, 5000);
      timer.unref();
      return timer;
    },
    endCall: (timer) => clearTimeout(timer),
  };
}
