import { context, propagation, SpanKind, type Context, type Span } from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';
import { safeExecuteInTheMiddle } from '@opentelemetry/instrumentation';
import { getDeadline, withoutDeadline } from '../../src/context';
import { withDeadlineOffWire, withDeadlineOnWire } from '../call/wire-context';
import type { Deadline } from '../../src/deadline';
import { abortCodeOf } from '../../src/errors';
import { endRefusedSpan } from '../../src/open';
import { DeadlinePropagator } from '../../src/propagation/DeadlinePropagator';
import { ATTR_DEADLINE_ABORT_CODE, ATTR_DEADLINE_OUTCOME, HEADER_AT_MS, HEADER_BAGGAGE, HEADER_REMAINING_MS } from '../../src/attributes';
import { baggageWithoutDeadline } from '../call/baggage-text';
import { refusalFor } from '../call/budget';
import type { ClientHost } from '../call/host';
import { ATTR_DEADLINE_WOULD_REJECT } from '../names';
import type { ResolvedConfig } from '../config';
import { delegateUnknownMethods, GuardedCall, type ClientGuardInit } from './client-call';
import {
  deadlineEpochMs,
  GRPC_DEADLINE_EXCEEDED,
  type ChannelCall,
  type GrpcChannel,
  type GrpcDeadline,
  type GrpcMetadata,
  type MetadataConstructor,
} from './grpc-types';
import { METADATA_SETTER } from './metadata';
import { refusedCall } from './refused-call';
import { ATTR_RPC_GRPC_STATUS_CODE, coveringSpan, startRpcSpan, withSpan } from './spans';
import { markStatusWith } from './status-error';
import { grpcTargetUrl } from './target-url';

type CreateCall = (this: GrpcChannel, method: string, deadline: GrpcDeadline, host: unknown, parentCall: unknown, propagateFlags: unknown) => ChannelCall;

/** Writes our headers from the context's deadline; shared, it holds no per-call state. */
const propagator = new DeadlinePropagator();

/** Whether delegateUnknownMethods has looked at a grpc-js call yet (once per process). */
let delegatesChecked = false;

export interface GrpcClientHost extends ClientHost {
  /** False when `grpc: false` was set after the instrumentation was created. */
  readonly grpcEnabled: boolean;
}

/**
 * Wraps `Channel.prototype.createCall`, the one place every grpc-js call
 * passes through: all four call kinds, from generated clients and from
 * `Client#make*Request` alike, with the `deadline` option already resolved.
 * It runs synchronously inside the call method, so the active context is the
 * caller's (or instrumentation-grpc's, holding its client span).
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
      const remaining = active.remainingMs();
      // The refusal's error (and its operation name) is built only for a call that is refused.
      const refuseIt = active.aborted || remaining <= 0 || remaining < settings.minUsefulMs;
      const refusal = refuseIt ? refusalFor(active, `grpc ${method}`, settings.minUsefulMs) : undefined;
      if (refusal !== undefined && !observe) return refuse(this, refusal, span, covering === undefined, Metadata);
      if (refusal !== undefined) span.setAttribute(ATTR_DEADLINE_WOULD_REJECT, true);

      const own = deadlineEpochMs(deadline);
      // Whole milliseconds, rounded down (never past the cutoff): grpc-js hands
      // `deadline - Date.now()` to setTimeout as it is, and Node keeps one timer
      // list per distinct duration, so a fractional deadline cost every call a
      // list of its own.
      const cutoffEpoch = Math.floor(nowEpoch + remaining);
      // Observe mode changes nothing on the call: its own deadline stays.
      const clampedByUs = !observe && cutoffEpoch < own;
      const call = original.call(this, method, clampedByUs ? cutoffEpoch : deadline, host, parentCall, propagateFlags);
      if (!delegatesChecked) {
        delegatesChecked = true;
        delegateUnknownMethods(call);
      }
      const ownSpan = covering === undefined ? span : undefined;
      const plan = new GrpcCallPlan(active, method, observe, clampedByUs, span, ownSpan, this, settings, ctx, clampedByUs ? Infinity : own, Metadata);
      return new GuardedCall(call, plan);
    };
}

/**
 * What the guard of one call needs from the caller's side: one object per
 * call, whose methods replace the per-call closures it would otherwise take.
 */
class GrpcCallPlan implements ClientGuardInit {
  readonly ownSpan: boolean;

  constructor(
    readonly deadline: Deadline,
    readonly method: string,
    readonly observe: boolean,
    readonly clampedByUs: boolean,
    readonly span: Span,
    /** The span when it is ours (no instrumentation-grpc span covers the call): the propagator writes trace context from it. */
    private readonly spanOfOurs: Span | undefined,
    readonly channel: GrpcChannel,
    private readonly settings: ResolvedConfig,
    private readonly ctx: Context,
    /** The call's own deadline when it is earlier than the cutoff, else Infinity. */
    private readonly ownEpoch: number,
    private readonly Metadata: MetadataConstructor,
  ) {
    this.ownSpan = spanOfOurs !== undefined;
  }

  inject(metadata: GrpcMetadata): void {
    if (propagates(this.settings.propagatesTo, this.channel)) injectDeadline(metadata, this.ctx, this.deadline, this.spanOfOurs, this.ownEpoch);
    else injectWithoutDeadline(metadata, this.ctx, this.spanOfOurs);
  }

  newMetadata(): GrpcMetadata {
    return new this.Metadata();
  }

  trustsRefusal(): boolean {
    const url = grpcTargetUrl(this.channel.getTarget());
    return this.settings.trustsReply({ transport: 'grpc', method: this.method, url, statusCode: GRPC_DEADLINE_EXCEEDED });
  }
}

/**
 * Our deadline metadata, next to the `grpc-timeout` grpc-js writes from the
 * clamped deadline. A call whose own deadline is earlier than the cutoff
 * sends that earlier deadline in our headers too, so the absolute and
 * relative values agree and the server sees no false skew. With a span of our
 * own, the global propagator writes trace-context and baggage as
 * instrumentation-grpc would.
 */
function injectDeadline(metadata: GrpcMetadata, callerCtx: Context, deadline: Deadline, ownSpan: Span | undefined, ownEpoch: number): void {
  // The caller may run where an earlier call to an unlisted host left its mark (see withDeadlineOnWire): this target is listed.
  const ctx = withDeadlineOnWire(callerCtx);
  if (ownSpan !== undefined) propagation.inject(withSpan(ctx, ownSpan), metadata, METADATA_SETTER);
  // instrumentation-grpc has injected through the global propagator from this
  // same context just before: if that holds ours, our headers are there already.
  const written = metadata.get(HEADER_AT_MS);
  if (written.length !== 1 || written[0] !== String(Math.floor(deadline.expiresAtMs))) propagator.inject(ctx, metadata, METADATA_SETTER);
  // A call clamped to the cutoff (the usual case) needs no clock read here.
  if (ownEpoch === Infinity) return;
  const nowEpoch = Date.now();
  if (ownEpoch < nowEpoch + deadline.remainingMs()) {
    metadata.set(HEADER_REMAINING_MS, String(Math.max(0, Math.floor(ownEpoch - nowEpoch))));
    metadata.set(HEADER_AT_MS, String(Math.floor(ownEpoch)));
  }
}

/** Whether `propagateTo` lets our metadata go to this channel's target. */
function propagates(allowed: ((url: string | undefined) => boolean) | undefined, channel: GrpcChannel): boolean {
  return allowed === undefined || allowed(grpcTargetUrl(channel.getTarget()));
}

/**
 * For a target off the `propagateTo` list: trace context as usual, but none
 * of our metadata and no `deadline.at_ms` baggage entry, whoever wrote them
 * (instrumentation-grpc injects through the global propagator first). The
 * call keeps its clamped `grpc-timeout`: that is gRPC's own deadline.
 */
function injectWithoutDeadline(metadata: GrpcMetadata, ctx: Context, ownSpan: Span | undefined): void {
  if (ownSpan !== undefined) propagation.inject(withSpan(withDeadlineOffWire(ctx), ownSpan), metadata, METADATA_SETTER);
  metadata.remove(HEADER_REMAINING_MS);
  metadata.remove(HEADER_AT_MS);
  const baggage = metadata.get(HEADER_BAGGAGE);
  if (baggage.length === 0) return;
  const kept = baggageWithoutDeadline(baggage.filter((value): value is string => typeof value === 'string'));
  if (kept === undefined) metadata.remove(HEADER_BAGGAGE);
  else metadata.set(HEADER_BAGGAGE, kept);
}

/** A call refused before it starts: DEADLINE_EXCEEDED that carries `error`, and no stream. */
function refuse(channel: GrpcChannel, error: Error, span: Span, ownSpan: boolean, Metadata: MetadataConstructor): ChannelCall {
  const status = { code: GRPC_DEADLINE_EXCEEDED, details: `refused before start: ${error.message}`, metadata: new Metadata() };
  markStatusWith(status, error);
  span.setAttribute(ATTR_DEADLINE_ABORT_CODE, abortCodeOf(error));
  if (ownSpan) {
    return refusedCall(status, channel.getTarget(), (final) => {
      span.setAttribute(ATTR_RPC_GRPC_STATUS_CODE, final.code);
      endRefusedSpan(span, error);
    });
  }
  // instrumentation-grpc ends its own span when the status reaches the caller.
  span.setAttribute(ATTR_DEADLINE_OUTCOME, 'not_started');
  return refusedCall(status, channel.getTarget(), () => {});
}

