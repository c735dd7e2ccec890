import { context, SpanKind, trace, type Context, type Tracer } from '@opentelemetry/api';
import { safeExecuteInTheMiddle } from '@opentelemetry/instrumentation';
import { getDeadline, setDeadline, withoutDeadline } from '../../src/context';
import { DeadlineNode } from '../../src/deadline-node';
import type { ResolvedConfig } from '../config';
import { HEADER_DEADLINE_EXPIRED } from '../names';
import { admit, isRefusal, type ServerHost } from '../server/admission';
import { deadlineEpochMs, GRPC_DEADLINE_EXCEEDED, type MetadataConstructor, type MethodDefinitionLike, type ServerCallback, type ServerCallLike } from './grpc-types';
import { SERVER_CALL_GETTER } from './metadata';
import { refusalDetails } from './refusal';
import { GRPC_SERVER_OPERATION, ServerCallWatch } from './server-call';
import { coveringSpan, endRpcSpan, LazyServerSpan } from './spans';

export interface GrpcServerHost extends ServerHost {
  readonly tracer: Tracer;
  readonly grpcEnabled: boolean;
}

type Handler = (this: unknown, call: ServerCallLike, callback?: ServerCallback) => unknown;
type AddService = (this: unknown, service: unknown, implementation: unknown, ...rest: unknown[]) => unknown;

/**
 * Wraps `Server#addService`: the implementation it registers has each
 * handler guarded. Wrapping here rather than `register` puts our handler
 * inside instrumentation-grpc's (which wraps what `register` stores), so ours
 * runs under its server span whichever was enabled first.
 */
export function makeAddServiceWrapper(host: GrpcServerHost, Metadata: MetadataConstructor) {
  return (original: AddService): AddService =>
    function addService(this: unknown, service, implementation, ...rest) {
      const guards = host.grpcEnabled && typeof service === 'object' && service !== null && typeof implementation === 'object' && implementation !== null;
      const guarded = guards ? guardImplementation(host, Metadata, service as Record<string, unknown>, implementation as Record<string, unknown>) : implementation;
      return original.call(this, service, guarded, ...rest);
    };
}

/** A view of `implementation` whose handlers are guarded; each still runs with `implementation` as `this`. */
function guardImplementation(
  host: GrpcServerHost,
  Metadata: MetadataConstructor,
  service: Record<string, unknown>,
  implementation: Record<string, unknown>,
): Record<string, unknown> {
  const guarded = Object.create(implementation) as Record<string, unknown>;
  for (const name of Object.keys(service)) {
    const method = service[name] as MethodDefinitionLike | undefined;
    if (typeof method !== 'object' || method === null || typeof method.path !== 'string') continue;
    // grpc-js falls back to the method's original (camelCase) name the same way.
    let handler = implementation[name];
    if (handler === undefined && typeof method.originalName === 'string') handler = implementation[method.originalName];
    if (typeof handler !== 'function') continue;
    guarded[name] = function guardedHandler(call: ServerCallLike, callback?: ServerCallback) {
      if (!host.isEnabled() || !host.grpcEnabled) return (handler as Handler).call(implementation, call, callback);
      return runGuarded(host, Metadata, method, call, callback, handler as Handler, implementation);
    };
  }
  return guarded;
}

/**
 * The deadline instrumentation-grpc's global propagator already read from
 * this call's metadata (it extracts before running the handler), if it holds
 * everything: grpc-js keeps `grpc-timeout` out of the metadata, so a node that
 * ends later than grpc-js's own deadline for the call is not used.
 */
function extractedFrom(ctx: Context, call: ServerCallLike): DeadlineNode | undefined {
  const active = getDeadline(ctx);
  if (!(active instanceof DeadlineNode) || active.source !== 'remote') return undefined;
  // Whole-ms values on both sides: within 1 ms they describe the same cutoff.
  return deadlineEpochMs(call.getDeadline()) + 1 < active.expiresAtMs ? undefined : active;
}

/** Whether to believe this caller's deadline: `trustIncomingGrpc`, else trusted unless `trustIncoming` is set. */
function trustsCaller(settings: ResolvedConfig, call: ServerCallLike, path: string): boolean {
  const hook = settings.trustIncomingGrpc;
  if (hook === undefined) return settings.trustIncoming === undefined;
  return safeExecuteInTheMiddle(() => hook({ path, peer: call.getPeer(), metadata: call.metadata }), () => {}, true) === true;
}

/** Admits one call, then runs its handler (with `implementation` as `this`) under its deadline, unless it was refused. */
function runGuarded(host: GrpcServerHost, Metadata: MetadataConstructor, method: MethodDefinitionLike, call: ServerCallLike, callback: ServerCallback | undefined, handler: Handler, implementation: unknown): unknown {
  const { path, requestStream, responseStream } = method;
  const ctx = context.active();
  const covering = coveringSpan(ctx, SpanKind.SERVER);
  // Without instrumentation-grpc's span, one of our own, made only for a call that has a deadline.
  const own = covering === undefined ? new LazyServerSpan(host.tracer, path, ctx, call.metadata) : undefined;
  const trusted = trustsCaller(host.settings, call, path);
  const arrival = { trusted, extracted: trusted && covering !== undefined ? extractedFrom(ctx, call) : undefined, carrier: call, getter: SERVER_CALL_GETTER };
  const deadline = admit(host, arrival, GRPC_SERVER_OPERATION, covering ?? own!.span);
  if (isRefusal(deadline)) {
    refuseCall(responseStream, call, callback, refusalDetails(deadline), Metadata);
    if (own !== undefined) endRpcSpan(own.span(), GRPC_DEADLINE_EXCEEDED, SpanKind.SERVER);
    return undefined;
  }
  let handlerContext: Context;
  let watch: ServerCallWatch;
  if (deadline === undefined) {
    // Ours is authoritative at the trust edge: drop what a global propagator extracted (as on HTTP).
    handlerContext = withoutDeadline(ctx);
    watch = new ServerCallWatch(call, responseStream);
  } else {
    const span = covering ?? own!.span();
    watch = new ServerCallWatch(call, responseStream, deadline, span, own !== undefined, host.settings.mode === 'observe');
    // An adopted deadline is in the context already.
    handlerContext = deadline === getDeadline(ctx) ? ctx : setDeadline(own === undefined ? ctx : trace.setSpan(own.parent, span), deadline);
    // A streaming call's listeners ('data', 'end', 'cancelled') run where grpc-js
    // emits them, outside the handler's context: bound, they see its deadline too.
    if (requestStream || responseStream) context.bind(handlerContext, call);
  }
  try {
    const wrapped = watch.wrapCallback(callback);
    // An adopted deadline runs in the context instrumentation-grpc made active.
    return handlerContext === ctx ? handler.call(implementation, call, wrapped) : context.with(handlerContext, handler, implementation, call, wrapped);
  } catch (err) {
    watch.handlerThrew();
    throw err;
  }
}

/**
 * Ends a refused call without running its handler: DEADLINE_EXCEEDED, the
 * message, and the trailer `x-deadline-expired: 1`, through the path a
 * handler itself would use (its callback, or an 'error' on its stream).
 */
function refuseCall(responseStream: boolean, call: ServerCallLike, callback: ServerCallback | undefined, details: string, Metadata: MetadataConstructor): void {
  const trailer = new Metadata();
  trailer.set(HEADER_DEADLINE_EXPIRED, '1');
  const error = { code: GRPC_DEADLINE_EXCEEDED, details, metadata: trailer };
  if (!responseStream && typeof callback === 'function') callback(error);
  else call.emit('error', error);
}
