import { context, SpanKind } from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';
import { safeExecuteInTheMiddle } from '@opentelemetry/instrumentation';
import { getDeadline, withoutDeadline } from '../../src/context';
import { refusalFor } from '../call/budget';
import type { ClientHost } from '../call/host';
import { ATTR_DEADLINE_WOULD_REJECT } from '../names';
import { GrpcCallGuard, type GrpcCallInit } from './client-call';
import { deadlineEpochMs, type ChannelCall, type GrpcChannel, type GrpcDeadline, type MetadataConstructor } from './grpc-types';
import { coveringSpan, startRpcSpan } from './spans';

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
      const remaining = active.remainingMs();
      const refusal = refusalFor(active, `grpc ${method}`, settings.minUsefulMs);
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
      const guard = new GrpcCallGuard(call, init);
      const start = call.start;
      call.start = (metadata, listener) => guard.start(metadata, listener, start);
      return call;
    };
}
