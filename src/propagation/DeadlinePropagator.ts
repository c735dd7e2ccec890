import { diag, propagation, type Context, type TextMapGetter, type TextMapPropagator, type TextMapSetter } from '@opentelemetry/api';
import { isTracingSuppressed, W3CBaggagePropagator } from '@opentelemetry/core';
import { getDeadline, isDeadlineOffWire, setDeadline } from '../context';
import { DeadlineNode } from '../deadline-node';
import { checkDuration, MAX_DEADLINE_MS, minCutoff, monotonicNow } from '../time';
import { BAGGAGE_DEADLINE_KEY, HEADER_AT_MS, HEADER_BAGGAGE, HEADER_CONNECT_TIMEOUT_MS, HEADER_GRPC_TIMEOUT, HEADER_REMAINING_MS, HEADER_RUN_DEADLINE_MS } from '../attributes';
import { parseGrpcTimeout, parseIntegerMs, smallest, smallestBaggageMs, type HeaderValue } from './parse';

/**
 * Which incoming values to believe.
 * - `min` (default): every source counts and the earliest cutoff wins. It never
 *   extends a budget and it counts queue dwell.
 * - `relative`: only remaining-time values (immune to the sender's clock skew).
 * - `absolute`: only epoch cutoffs (counts time spent in queues and proxies).
 */
export type ClockPolicy = 'min' | 'relative' | 'absolute';

export interface DeadlinePropagatorConfig {
  clock?: ClockPolicy;
  /** Caps what a caller can ask for, in ms. Default, and never more than: MAX_DEADLINE_MS (100 days). */
  maxIncomingMs?: number;
  /** `operation` of the deadlines extract builds. Default `remote`. */
  operation?: string;
}

/** What extract found on the wire, before it is turned into a Deadline. */
export interface IncomingDeadline {
  remainingMs: number;
  expiresAtMs: number;
  wireSkewMs: number | undefined;
}

const CLOCK_POLICIES: readonly ClockPolicy[] = ['min', 'relative', 'absolute'];

/** The value of `key` in the carrier, when it is a string or a list. */
function wireValue(getter: TextMapGetter, carrier: unknown, key: string): HeaderValue {
  const value: unknown = getter.get(carrier, key);
  return typeof value === 'string' || Array.isArray(value) ? (value as HeaderValue) : undefined;
}

/** The smallest whole-ms value of `key` in the carrier. */
function msIn(getter: TextMapGetter, carrier: unknown, key: string): number | undefined {
  return smallest(wireValue(getter, carrier, key), parseIntegerMs);
}

/** The smaller of two values; undefined when neither is given. */
function smallerOf(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined || (b !== undefined && b < a) ? b : a;
}

/**
 * Carries the active deadline on the wire and rebuilds it on the other side.
 *
 * inject writes `x-deadline-remaining-ms` (authoritative across skewed clocks),
 * `x-deadline-at-ms` and the baggage entry `deadline.at_ms`. extract accepts
 * those plus `grpc-timeout`, `connect-timeout-ms` and `x-run-deadline-ms`.
 * Neither ever throws.
 */
export class DeadlinePropagator implements TextMapPropagator {
  private readonly clock: ClockPolicy;
  private readonly maxIncomingMs: number;
  private readonly operation: string;
  private readonly baggageCodec = new W3CBaggagePropagator();

  constructor(config: DeadlinePropagatorConfig = {}) {
    const clock = config.clock ?? 'min';
    if (!CLOCK_POLICIES.includes(clock)) {
      throw new TypeError(`clock must be one of ${CLOCK_POLICIES.join(', ')}, got ${String(clock)}`);
    }
    this.clock = clock;
    this.maxIncomingMs =
      Math.min(MAX_DEADLINE_MS, config.maxIncomingMs === undefined ? Infinity : checkDuration('maxIncomingMs', config.maxIncomingMs));
    this.operation = config.operation ?? 'remote';
  }

  inject(ctx: Context, carrier: unknown, setter: TextMapSetter): void {
    try {
      // Off the wire: the deadline holds here, but whoever marked the context sends it (or withholds it).
      if (isTracingSuppressed(ctx) || isDeadlineOffWire(ctx)) return;
      const deadline = getDeadline(ctx);
      if (deadline === undefined) return;
      const atMs = String(Math.floor(deadline.expiresAtMs));
      setter.set(carrier, HEADER_REMAINING_MS, String(Math.floor(deadline.remainingMs())));
      setter.set(carrier, HEADER_AT_MS, atMs);
      // Through OTel's own baggage codec, so the user's entries keep their encoding. setDeadline has
      // usually put this very entry in the context's baggage already.
      const current = propagation.getBaggage(ctx);
      if (current?.getEntry(BAGGAGE_DEADLINE_KEY)?.value === atMs) return this.baggageCodec.inject(ctx, carrier, setter);
      const bag = (current ?? propagation.createBaggage()).setEntry(BAGGAGE_DEADLINE_KEY, { value: atMs });
      this.baggageCodec.inject(propagation.setBaggage(ctx, bag), carrier, setter);
    } catch (err) {
      // A propagator must never break the request it rides on; say why nothing was written.
      diag.debug('otel-deadline: DeadlinePropagator.inject wrote nothing', err);
    }
  }

  extract(ctx: Context, carrier: unknown, getter: TextMapGetter): Context {
    try {
      const incoming = this.read(carrier, getter);
      if (incoming === undefined) return ctx;
      const nowMono = monotonicNow();
      const cutoffMono = nowMono + incoming.remainingMs;
      const active = getDeadline(ctx);
      let parent = undefined;
      if (active !== undefined) {
        const activeCutoff = active instanceof DeadlineNode ? active.cutoffMono : nowMono + active.remainingMs();
        // Never extend a deadline that is already active here.
        if (minCutoff(cutoffMono, activeCutoff) === activeCutoff) return ctx;
        parent = active;
      }
      const deadline = new DeadlineNode({
        operation: this.operation,
        cutoffMono,
        expiresAtMs: incoming.expiresAtMs,
        source: 'remote',
        budgetMs: incoming.remainingMs,
        parent,
        wireSkewMs: incoming.wireSkewMs,
      });
      return setDeadline(ctx, deadline);
    } catch (err) {
      diag.debug('otel-deadline: DeadlinePropagator.extract kept the context as it was', err);
      return ctx;
    }
  }

  /** Reads and combines the wire values; `undefined` when none is usable. Never throws. */
  read(carrier: unknown, getter: TextMapGetter): IncomingDeadline | undefined {
    try {
      const grpcTimeout = smallest(wireValue(getter, carrier, HEADER_GRPC_TIMEOUT), parseGrpcTimeout);
      const relative = smallerOf(smallerOf(msIn(getter, carrier, HEADER_REMAINING_MS), grpcTimeout), smallerOf(msIn(getter, carrier, HEADER_CONNECT_TIMEOUT_MS), msIn(getter, carrier, HEADER_RUN_DEADLINE_MS)));
      const absolute = smallerOf(msIn(getter, carrier, HEADER_AT_MS), smallestBaggageMs(wireValue(getter, carrier, HEADER_BAGGAGE), BAGGAGE_DEADLINE_KEY));
      const nowEpoch = Date.now();
      const fromAbsolute = absolute === undefined ? undefined : Math.max(0, absolute - nowEpoch);
      let remaining = this.clock === 'relative' ? relative : this.clock === 'absolute' ? fromAbsolute : smallerOf(relative, fromAbsolute);
      if (remaining === undefined) return undefined;
      remaining = Math.min(remaining, this.maxIncomingMs);
      const wireSkewMs = relative !== undefined && absolute !== undefined ? Math.round(absolute - (nowEpoch + relative)) : undefined;
      return { remainingMs: remaining, expiresAtMs: nowEpoch + remaining, wireSkewMs };
    } catch (err) {
      // A throwing getter or carrier counts as no deadline at all.
      diag.debug('otel-deadline: DeadlinePropagator could not read the carrier', err);
      return undefined;
    }
  }

  fields(): string[] {
    return [HEADER_REMAINING_MS, HEADER_AT_MS, HEADER_BAGGAGE, HEADER_GRPC_TIMEOUT, HEADER_CONNECT_TIMEOUT_MS, HEADER_RUN_DEADLINE_MS];
  }
}
