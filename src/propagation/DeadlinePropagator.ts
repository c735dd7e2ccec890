import {
  defaultTextMapGetter,
  diag,
  propagation,
  type Context,
  type TextMapGetter,
  type TextMapPropagator,
  type TextMapSetter,
} from '@opentelemetry/api';
import { isTracingSuppressed, W3CBaggagePropagator } from '@opentelemetry/core';
import { getDeadline, isDeadlineOffWire, isDeadlineOnlyBaggage, isWritingDeadlineHeaders, setDeadline } from '../context';
import { DeadlineNode } from '../deadline-node';
import { checkDuration, MAX_DEADLINE_MS, minCutoff, monotonicNow } from '../time';
import {
  BAGGAGE_DEADLINE_KEY,
  HEADER_AT_MS,
  HEADER_BAGGAGE,
  HEADER_CONNECT_TIMEOUT_MS,
  HEADER_GRPC_TIMEOUT,
  HEADER_REMAINING_MS,
  HEADER_RUN_DEADLINE_MS,
} from '../attributes';
import { CutoffText, remainingText } from './cutoff-text';
import { smallestBaggageMs, smallestGrpcTimeout, smallestIntegerMs, type HeaderValue } from './parse';

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

/** The wire values extract reads. */
interface WireValues {
  remaining: HeaderValue;
  grpcTimeout: HeaderValue;
  connectTimeout: HeaderValue;
  runDeadline: HeaderValue;
  atMs: HeaderValue;
  baggage: HeaderValue;
}

function headerValue(value: unknown): HeaderValue {
  return typeof value === 'string' || Array.isArray(value) ? (value as HeaderValue) : undefined;
}

function first(getter: TextMapGetter, carrier: unknown, key: string): HeaderValue {
  return headerValue(getter.get(carrier, key));
}

function valuesThrough(getter: TextMapGetter, carrier: unknown): WireValues {
  return {
    remaining: first(getter, carrier, HEADER_REMAINING_MS),
    grpcTimeout: first(getter, carrier, HEADER_GRPC_TIMEOUT),
    connectTimeout: first(getter, carrier, HEADER_CONNECT_TIMEOUT_MS),
    runDeadline: first(getter, carrier, HEADER_RUN_DEADLINE_MS),
    atMs: first(getter, carrier, HEADER_AT_MS),
    baggage: first(getter, carrier, HEADER_BAGGAGE),
  };
}

/**
 * What OTel's defaultTextMapGetter would return (`carrier[key]`), read with
 * literal names: instrumentation-http extracts from a request's headers with
 * that getter, and a lookup through a variable key on objects of many shapes
 * (every request's header set makes its own) is a megamorphic keyed load,
 * about 170 instructions for a header that is not there, which most of these
 * never are; a named load is a fraction of that. `satisfies` ties each literal
 * to its public constant.
 */
function plainValues(carrier: unknown): WireValues {
  if (carrier == null) return NO_VALUES;
  const headers = carrier as Record<string, unknown>;
  return {
    remaining: headerValue(headers['x-deadline-remaining-ms' satisfies typeof HEADER_REMAINING_MS]),
    grpcTimeout: headerValue(headers['grpc-timeout' satisfies typeof HEADER_GRPC_TIMEOUT]),
    connectTimeout: headerValue(headers['connect-timeout-ms' satisfies typeof HEADER_CONNECT_TIMEOUT_MS]),
    runDeadline: headerValue(headers['x-run-deadline-ms' satisfies typeof HEADER_RUN_DEADLINE_MS]),
    atMs: headerValue(headers['x-deadline-at-ms' satisfies typeof HEADER_AT_MS]),
    baggage: headerValue(headers['baggage' satisfies typeof HEADER_BAGGAGE]),
  };
}

const NO_VALUES: WireValues = Object.freeze({
  remaining: undefined,
  grpcTimeout: undefined,
  connectTimeout: undefined,
  runDeadline: undefined,
  atMs: undefined,
  baggage: undefined,
});

/** The smaller of two optional values (no rest parameters: extract runs on every request). */
function smaller(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined) return b;
  return b === undefined || a <= b ? a : b;
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
  private readonly cutoffText = new CutoffText();

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
      if (isTracingSuppressed(ctx) || isDeadlineOffWire(ctx) || isWritingDeadlineHeaders(ctx)) return;
      const deadline = getDeadline(ctx);
      if (deadline === undefined) return;
      const text = this.cutoffText.of(deadline.expiresAtMs);
      const atMs = text.atMs;
      setter.set(carrier, HEADER_REMAINING_MS, remainingText(deadline));
      setter.set(carrier, HEADER_AT_MS, atMs);
      const bag = propagation.getBaggage(ctx);
      if (bag === undefined || isDeadlineOnlyBaggage(bag)) {
        // Only our entry: no user entries to encode, so skip the codec on this hot path.
        setter.set(carrier, HEADER_BAGGAGE, text.baggage);
      } else {
        // Serialize through OTel's own baggage codec so the user's entries keep their encoding.
        const withOurs = bag.setEntry(BAGGAGE_DEADLINE_KEY, { value: atMs });
        this.baggageCodec.inject(propagation.setBaggage(ctx, withOurs), carrier, setter);
      }
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
      return this.combine(carrier, getter);
    } catch (err) {
      // A throwing getter or carrier counts as no deadline at all.
      diag.debug('otel-deadline: DeadlinePropagator could not read the carrier', err);
      return undefined;
    }
  }

  private combine(carrier: unknown, getter: TextMapGetter): IncomingDeadline | undefined {
    const wire = getter === defaultTextMapGetter ? plainValues(carrier) : valuesThrough(getter, carrier);
    const relative = smaller(
      smaller(smallestIntegerMs(wire.remaining), smallestGrpcTimeout(wire.grpcTimeout)),
      smaller(smallestIntegerMs(wire.connectTimeout), smallestIntegerMs(wire.runDeadline)),
    );
    const absolute = smaller(smallestIntegerMs(wire.atMs), smallestBaggageMs(wire.baggage, BAGGAGE_DEADLINE_KEY));
    const nowEpoch = Date.now();
    const fromAbsolute = absolute === undefined ? undefined : Math.max(0, absolute - nowEpoch);
    let remaining: number | undefined;
    if (this.clock === 'relative') remaining = relative;
    else if (this.clock === 'absolute') remaining = fromAbsolute;
    else remaining = smaller(relative, fromAbsolute);
    if (remaining === undefined) return undefined;
    if (remaining > this.maxIncomingMs) remaining = this.maxIncomingMs;
    const wireSkewMs =
      relative !== undefined && absolute !== undefined ? Math.round(absolute - (nowEpoch + relative)) : undefined;
    return { remainingMs: remaining, expiresAtMs: nowEpoch + remaining, wireSkewMs };
  }

  fields(): string[] {
    return [
      HEADER_REMAINING_MS,
      HEADER_AT_MS,
      HEADER_BAGGAGE,
      HEADER_GRPC_TIMEOUT,
      HEADER_CONNECT_TIMEOUT_MS,
      HEADER_RUN_DEADLINE_MS,
    ];
  }
}
