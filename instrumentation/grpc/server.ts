import { context, SpanKind, SpanStatusCode, trace, type Context, type Tracer } from '@opentelemetry/api';
import { safeExecuteInTheMiddle } from '@opentelemetry/instrumentation';
import { getDeadline, setDeadline, withoutDeadline } from '../../src/context';
import { DeadlineNode } from '../../src/deadline-node';
import { ATTR_DEADLINE_ABORT_CODE, ATTR_DEADLINE_OUTCOME } from '../../src/attributes';
import type { RejectClaim } from '../call/reject-claim';
import type { ResolvedConfig } from '../config';
import { ATTR_DEADLINE_WOULD_REJECT, HEADER_DEADLINE_EXPIRED } from '../names';
import { budgetFromWire, fromExtracted, rejectionFor, type IncomingBudget, type RejectCode } from '../server/admission';
import type { ServerHost } from '../server/listener';
import {
  deadlineEpochMs,
  GRPC_DEADLINE_EXCEEDED,
  handlerKind,
  type HandlerKind,
  type MetadataConstructor,
  type MethodDefinitionLike,
  type ServerCallback,
  type ServerCallLike,
} from './grpc-types';
import { SERVER_CALL_GETTER } from './metadata';
import { isStreamingResponse, restatingCallback, watchStreamErrors } from './forwarded-status';
import { refusalDetails } from './refusal';
import { ServerCallLifecycle } from './server-call';
import { callerContext, coveringSpan, endRpcSpan, startRpcSpan } from './spans';

/** The operation name of the deadline a gRPC handler runs under. */
export const GRPC_SERVER_OPERATION = 'grpc.server';

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
      if (!host.grpcEnabled || typeof service !== 'object' || service === null || typeof implementation !== 'object' || implementation === null) {
        return original.call(this, service, implementation, ...rest);
      }
      return original.call(this, service, guardImplementation(host, Metadata, service as Record<string, unknown>, implementation as Record<string, unknown>), ...rest);
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
    guarded[name] = guardHandler(host, Metadata, method.path, handlerKind(method), handler as Handler, implementation);
  }
  return guarded;
}

function guardHandler(host: GrpcServerHost, Metadata: MetadataConstructor, path: string, kind: HandlerKind, handler: Handler, self: unknown): Handler {
  return function guardedHandler(call, callback) {
    if (!host.isEnabled() || !host.grpcEnabled) return handler.call(self, call, callback);
    return runGuarded(host, Metadata, path, kind, handler, self, call, callback);
  };
}

/**
 * The deadline instrumentation-grpc's global propagator already read from
 * this call's metadata (it extracts before running the handler), if it holds
 * everything: grpc-js keeps `grpc-timeout` out of the metadata, so a node that
 * ends later than grpc-js's own deadline for the call is not used. Reusing it
 * saves reading the metadata twice.
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

function runGuarded(
  host: GrpcServerHost,
  Metadata: MetadataConstructor,
  path: string,
  kind: HandlerKind,
  handler: Handler,
  self: unknown,
  call: ServerCallLike,
  callback: ServerCallback | undefined,
): unknown {
  const { settings } = host;
  const ctx = context.active();
  const covering = coveringSpan(ctx, SpanKind.SERVER);
  const trusted = trustsCaller(settings, call, path);
  const extracted = trusted && covering !== undefined ? extractedFrom(ctx, call) : undefined;
  const budget =
    extracted !== undefined
      ? fromExtracted(extracted, settings.maxIncomingMs)
      : budgetFromWire(settings, host.serverPropagator, trusted, call, SERVER_CALL_GETTER);
  if (budget === undefined) {
    // No deadline here, but the handler may still pass on a callee's refusal: it is restated all the same.
    const forwarding = typeof callback === 'function' ? restatingCallback(callback) : callback;
    if (isStreamingResponse(kind)) watchStreamErrors(call);
    // Ours is authoritative at the trust edge: drop what a global propagator extracted (as on HTTP).
    const cleaned = withoutDeadline(ctx);
    return cleaned === ctx ? handler.call(self, call, forwarding) : context.with(cleaned, () => handler.call(self, call, forwarding));
  }

  const parent = covering === undefined ? callerContext(ctx, call.metadata) : ctx;
  const span = covering ?? startRpcSpan(host.tracer, SpanKind.SERVER, path, parent);
  const observe = settings.mode === 'observe';
  const rejection = rejectionFor(budget, settings.minUsefulMs);
  if (rejection !== undefined) {
    if (observe) {
      span.setAttribute(ATTR_DEADLINE_WOULD_REJECT, true);
    } else {
      span.setAttributes({ [ATTR_DEADLINE_OUTCOME]: 'not_started', [ATTR_DEADLINE_ABORT_CODE]: rejection });
      span.setStatus({ code: SpanStatusCode.ERROR, message: rejection });
      refuseCall(kind, call, callback, refusalDetails(claimOf(rejection, budget, settings.minUsefulMs)), Metadata);
      if (covering === undefined) endRpcSpan(span, GRPC_DEADLINE_EXCEEDED, SpanKind.SERVER);
      return undefined;
    }
  }

  // The node the global propagator built from this call's metadata, unless
  // maxIncomingMs cut it shorter: the handler's context then needs no change.
  const adopted = extracted !== undefined && budget.cutoffMono === extracted.cutoffMono ? extracted.adoptAs(GRPC_SERVER_OPERATION) : undefined;
  const deadline = adopted ?? new DeadlineNode({
    operation: GRPC_SERVER_OPERATION,
    cutoffMono: budget.cutoffMono,
    expiresAtMs: budget.expiresAtMs,
    source: budget.source,
    budgetMs: budget.remainingMs,
    wireSkewMs: budget.wireSkewMs,
  });
  const lifecycle = new ServerCallLifecycle({ call, kind, deadline, operation: GRPC_SERVER_OPERATION, span, ownSpan: covering === undefined, observe });
  const guardedCallback = lifecycle.wrapCallback(callback);
  const handlerContext = adopted !== undefined ? ctx : setDeadline(covering === undefined ? trace.setSpan(parent, span) : ctx, deadline);
  // A streaming call's listeners ('data', 'end', 'cancelled') run where grpc-js
  // emits them, outside the handler's context: bound, they see its deadline too.
  if (kind !== 'unary') context.bind(handlerContext, call);
  try {
    // An adopted deadline is in the active context already: entering it again would only cost a context switch.
    if (handlerContext === ctx) return handler.call(self, call, guardedCallback);
    return context.with(handlerContext, () => handler.call(self, call, guardedCallback));
  } catch (err) {
    lifecycle.handlerThrew();
    throw err;
  }
}

/** What the refusal tells the caller: the code, and for INSUFFICIENT_BUDGET the two numbers behind it. */
function claimOf(rejection: RejectCode, budget: IncomingBudget, minUsefulMs: number): RejectClaim {
  return rejection === 'DEADLINE_EXCEEDED' ? { code: rejection } : { code: rejection, neededMs: minUsefulMs, remainingMs: budget.remainingMs };
}

/**
 * Ends a refused call without running its handler: DEADLINE_EXCEEDED, the
 * message, and the trailer `x-deadline-expired: 1`, through the path a
 * handler itself would use (its callback, or an 'error' on its stream).
 */
function refuseCall(kind: HandlerKind, call: ServerCallLike, callback: ServerCallback | undefined, details: string, Metadata: MetadataConstructor): void {
  const trailer = new Metadata();
  trailer.set(HEADER_DEADLINE_EXPIRED, '1');
  const error = { code: GRPC_DEADLINE_EXCEEDED, details, metadata: trailer };
  if ((kind === 'unary' || kind === 'clientStream') && typeof callback === 'function') callback(error);
  else call.emit('error', error);
}
