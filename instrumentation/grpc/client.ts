import { context, SpanKind } from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';
import { safeExecuteInTheMiddle } from '@opentelemetry/instrumentation';
import { getDeadline, withoutDeadline } from '../../src/context';
import type { ClientHost } from '../call/host';
import { GrpcCallGuard } from './client-call';
import type { ChannelCall, GrpcChannel, GrpcDeadline, MetadataConstructor } from './grpc-types';
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
      const covering = coveringSpan(ctx, SpanKind.CLIENT);
      const span = covering ?? startRpcSpan(tracer, SpanKind.CLIENT, method, ctx);
      const guard = new GrpcCallGuard(active, settings, this, method, ctx, span, covering === undefined, Metadata);
      const call = original.call(this, method, guard.callDeadline(deadline), host, parentCall, propagateFlags);
      guard.attach(call);
      return call;
    };
}
