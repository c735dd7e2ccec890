import { context, propagation, SpanKind, trace, type Context, type Span } from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';
import { safeExecuteInTheMiddle } from '@opentelemetry/instrumentation';
import { getDeadline, withoutDeadline } from '../../src/context';
import { withDeadlineOffWire, withDeadlineOnWire } from '../call/wire-context';
import type { Deadline } from '../../src/deadline';
import { DeadlinePropagator } from '../../src/propagation/DeadlinePropagator';
import { HEADER_AT_MS, HEADER_BAGGAGE, HEADER_REMAINING_MS } from '../../src/attributes';
import { parseIntegerMs } from '../../src/propagation/parse';
import { baggageWithoutDeadline } from '../call/baggage-text';
import { budgetLeft, mayStart, refusalAt } from '../call/budget';
import type { ClientHost } from '../call/host';
import { ATTR_DEADLINE_WOULD_REJECT } from '../names';
import { GrpcCallGuard, type GrpcCallInit } from './client-call';
import { deadlineEpochMs, type ChannelCall, type GrpcChannel, type GrpcDeadline, type GrpcMetadata, type MetadataConstructor } from './grpc-types';
import { METADATA_SETTER } from './metadata';
import { coveringSpan, startRpcSpan } from './spans';
import { grpcTargetUrl } from './target-url';

type CreateCall = (this: GrpcChannel, method: string, deadline: GrpcDeadline, host: unknown, parentCall: unknown, propagateFlags: unknown) => ChannelCall;

export interface GrpcClientHost extends ClientHost {
  /** False when `grpc: false` was set after the instrumentation was created. */
  readonly grpcEnabled: boolean;
}

/**
 * Wraps `Channel.prototype.createCall`, the one place every grpc-js call passes through (docs/internals.md):
 * all four call kinds, from generated clients and `Client#make*Request` alike, under whatever interceptors
 * the client has, with the `deadline` call option resolved. It runs synchronously inside the call method,
 * so the active context is the caller's (or instrumentation-grpc's, holding its client span). The call gets
 * the earlier of its own deadline and our cutoff, and a guard on its start (GrpcCallGuard).
 */
export function makeCreateCallWrapper(instrumentation: GrpcClientHost, Metadata: MetadataConstructor) {
  return (original: CreateCall): CreateCall =>
    function createCall(this: GrpcChannel, method, deadline, host, parentCall, propagateFlags) {
      const ctx = context.active();
      const active = instrumentation.grpcEnabled ? getDeadline(ctx) : undefined;
      if (active === undefined || isTracingSuppressed(ctx)) return original.call(this, method, deadline, host, parentCall, propagateFlags);
      const { settings, tracer } = instrumentation;
      const ignore = settings.ignoreOutgoingRequest;
      if (ignore !== undefined) {
        const info = { transport: 'grpc' as const, method, url: this.getTarget() };
        if (safeExecuteInTheMiddle(() => ignore(info), () => {}, true) === true) {
          // Started without the deadline, so no propagator writes it: as for HTTP.
          return context.with(withoutDeadline(ctx), () => original.call(this, method, deadline, host, parentCall, propagateFlags));
        }
      }
      const observe = settings.mode === 'observe';
      const covering = coveringSpan(ctx, SpanKind.CLIENT);
      const span = covering ?? startRpcSpan(tracer, SpanKind.CLIENT, method, ctx);
      // The wall clock before the monotonic one: a pause between the two reads can then only make
      // the deadline handed to grpc-js below earlier than our cutoff, never later.
      const nowEpoch = Date.now();
      const left = budgetLeft(active);
      const remaining = left >= 0 ? left : active.remainingMs();
      const refusal = mayStart(left, settings.minUsefulMs) ? undefined : refusalAt(active, left, `grpc ${method}`, settings.minUsefulMs);
      if (refusal !== undefined && observe) span.setAttribute(ATTR_DEADLINE_WOULD_REJECT, true);
      const own = deadlineEpochMs(deadline);
      // Whole milliseconds, rounded down (never past the cutoff): grpc-js hands
      // `deadline - Date.now()` to setTimeout as it is.
      const cutoffEpoch = Math.floor(nowEpoch + remaining);
      // Observe mode changes nothing on the call: its own deadline stays.
      const clampedByUs = !observe && cutoffEpoch < own;
      const call = original.call(this, method, clampedByUs ? cutoffEpoch : deadline, host, parentCall, propagateFlags);
      const init: GrpcCallInit = {
        deadline: active,
        method,
        observe,
        refusal: observe ? undefined : refusal,
        clampedByUs,
        span,
        ownSpan: covering === undefined,
        channel: this,
        settings,
        ctx,
        ownEpoch: clampedByUs ? Infinity : own,
        Metadata,
      };
      const guard = new GrpcCallGuard(call, init, injectCallMetadata);
      const start = call.start;
      call.start = (metadata, listener) => guard.start(metadata, listener, start);
      return call;
    };
}

/** Writes our headers from the context's deadline; shared, it holds no per-call state. */
const propagator = new DeadlinePropagator();

/** Our deadline metadata if `propagateTo` lets it go to this channel's target, else none. */
function injectCallMetadata(metadata: GrpcMetadata, init: GrpcCallInit): void {
  const { settings, channel, ctx, deadline, ownSpan, span, ownEpoch } = init;
  const spanOfOurs = ownSpan ? span : undefined;
  const allowed = settings.propagatesTo;
  if (allowed === undefined || allowed(grpcTargetUrl(channel.getTarget()))) injectDeadline(metadata, ctx, deadline, spanOfOurs, ownEpoch);
  else injectWithoutDeadline(metadata, ctx, spanOfOurs);
}

/**
 * Our deadline metadata, next to the `grpc-timeout` grpc-js writes from the clamped deadline; a call's own
 * earlier deadline goes in ours too, so the server sees no false skew. With a span of our own, the global
 * propagator writes trace-context and baggage as instrumentation-grpc would.
 */
function injectDeadline(metadata: GrpcMetadata, callerCtx: Context, deadline: Deadline, ownSpan: Span | undefined, ownEpoch: number): void {
  // The caller may run where an earlier call to an unlisted host left its mark (see withDeadlineOnWire): this target is listed.
  const ctx = withDeadlineOnWire(callerCtx);
  if (ownSpan !== undefined) propagation.inject(trace.setSpan(ctx, ownSpan), metadata, METADATA_SETTER);
  if (ownSpan !== undefined || !holdsDeadline(metadata, deadline)) propagator.inject(ctx, metadata, METADATA_SETTER);
  if (ownEpoch === Infinity) return;
  const nowEpoch = Date.now();
  if (ownEpoch < nowEpoch + deadline.remainingMs()) {
    metadata.set(HEADER_REMAINING_MS, String(Math.max(0, Math.floor(ownEpoch - nowEpoch))));
    metadata.set(HEADER_AT_MS, String(Math.floor(ownEpoch)));
  }
}

/**
 * Whether the metadata holds what our propagator would write now. It does when the global propagator holds a
 * DeadlinePropagator (its fields say so), which instrumentation-grpc's inject ran a moment before: headers and
 * baggage entry. The remaining must still be this millisecond's: an interceptor may have held the start back.
 */
function holdsDeadline(metadata: GrpcMetadata, deadline: Deadline): boolean {
  if (!globalPropagatorWritesDeadline()) return false;
  const remaining = writtenMs(metadata, HEADER_REMAINING_MS);
  if (remaining === undefined || Math.abs(remaining - Math.floor(deadline.remainingMs())) > 1) return false;
  return writtenMs(metadata, HEADER_AT_MS) === Math.floor(deadline.expiresAtMs);
}

/** Whether the global propagator's fields list ours; a user propagator whose `fields()` throws counts as no. */
function globalPropagatorWritesDeadline(): boolean {
  try {
    return propagation.fields().includes(HEADER_AT_MS);
  } catch {
    return false;
  }
}

/** The value of `key` when it is one whole number of ms, as our propagator writes it. */
function writtenMs(metadata: GrpcMetadata, key: string): number | undefined {
  const values = metadata.get(key);
  return values.length === 1 && typeof values[0] === 'string' ? parseIntegerMs(values[0]) : undefined;
}

/**
 * For a target off the `propagateTo` list: trace context as usual, but none
 * of our metadata and no `deadline.at_ms` baggage entry, whoever wrote them
 * (instrumentation-grpc injects through the global propagator first). The
 * call keeps its clamped `grpc-timeout`: that is gRPC's own deadline.
 */
function injectWithoutDeadline(metadata: GrpcMetadata, ctx: Context, ownSpan: Span | undefined): void {
  if (ownSpan !== undefined) propagation.inject(trace.setSpan(withDeadlineOffWire(ctx), ownSpan), metadata, METADATA_SETTER);
  metadata.remove(HEADER_REMAINING_MS);
  metadata.remove(HEADER_AT_MS);
  const baggage = metadata.get(HEADER_BAGGAGE);
  if (baggage.length === 0) return;
  const kept = baggageWithoutDeadline(baggage.filter((value): value is string => typeof value === 'string'));
  if (kept === undefined) metadata.remove(HEADER_BAGGAGE);
  else metadata.set(HEADER_BAGGAGE, kept);
}
