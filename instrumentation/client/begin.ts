import { budgetLeft, mayStart, refusalAt } from '../call/budget';
import { SpanKind, trace, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';
import { safeExecuteInTheMiddle } from '@opentelemetry/instrumentation';
import { getDeadline, mayDispatchInline, withDeadlineOffWire, withDeadlineOnWire, withOutgoingCall, withoutDeadline } from '../../src/context';
import { abortCodeOf } from '../../src/errors';
import { endRefusedSpan } from '../../src/open';
import { ATTR_DEADLINE_ABORT_CODE, ATTR_DEADLINE_OUTCOME } from '../../src/attributes';
import type { ResolvedConfig } from '../config';
import type { OutgoingRequestInfo } from '../types';
import { CALL_KEY, IGNORED_CALL, OutgoingCall } from './call';

export interface CallRequest {
  /** The HTTP transports; gRPC has its own client path. */
  transport: Exclude<OutgoingRequestInfo['transport'], 'grpc'>;
  method: string;
  hasBody: boolean;
  /** Computed only when `ignoreOutgoingRequest` or `propagateTo` is configured. */
  url: () => string | undefined;
  callerSignal?: AbortSignal;
  /**
   * The transport creates the request, and runs every hook that looks for the
   * call, synchronously inside its dispatch (undici): the call may then be
   * dispatched in the caller's own context with runInCallTransport, without
   * a transport context (see `inline` in Decision).
   */
  synchronousHooks?: boolean;
}

export type Decision =
  | { kind: 'pass'; context?: Context }
  | { kind: 'refuse'; error: Error }
  /**
   * `propagate`: whether the deadline headers may go to the call's first URL (`propagateTo`).
   * `inline`: dispatch with runInCallTransport, in the caller's context (`context` is that
   * context then); otherwise run the transport in `context`.
   */
  | { kind: 'guard'; call: OutgoingCall; context: Context; propagate: boolean; inline: boolean };

const PASS: Decision = { kind: 'pass' };

/**
 * Decides what happens to one outgoing call: passed through untouched (no
 * deadline, tracing suppressed as exporters do, ignored by config), refused
 * before anything is sent, or guarded.
 */
export function beginCall(settings: ResolvedConfig, request: CallRequest, ctx: Context): Decision {
  if (isTracingSuppressed(ctx)) return PASS;
  const deadline = getDeadline(ctx);
  if (deadline === undefined) return PASS;
  if (request.callerSignal?.aborted) return PASS;
  const ignore = settings.ignoreOutgoingRequest;
  if (ignore !== undefined) {
    const info: OutgoingRequestInfo = { transport: request.transport, method: request.method, url: request.url() };
    if (safeExecuteInTheMiddle(() => ignore(info), () => {}, true) === true) {
      // Run without the deadline: no propagator inside the transport (a global
      // one used by an http or undici instrumentation) writes it.
      return { kind: 'pass', context: withoutDeadline(ctx).setValue(CALL_KEY, IGNORED_CALL) };
    }
  }
  const observe = settings.mode === 'observe';
  // The operation's name (a new string) only for a refusal.
  const left = budgetLeft(deadline);
  const refusal = mayStart(left, settings.minUsefulMs) ? undefined : refusalAt(deadline, left, `${request.transport} ${request.method}`, settings.minUsefulMs);
  if (refusal !== undefined && !observe) return { kind: 'refuse', error: refusal };
  const call = new OutgoingCall({
    deadline,
    transport: request.transport,
    method: request.method,
    hasBody: request.hasBody,
    observe,
    callerSignal: request.callerSignal,
  });
  if (refusal !== undefined) call.markWouldReject();
  const allowed = settings.propagatesTo;
  const propagate = allowed === undefined || safeExecuteInTheMiddle(() => allowed(request.url()), () => {}, true) === true;
  const inline = propagate && request.synchronousHooks === true && mayDispatchInline(ctx);
  return { kind: 'guard', call, context: inline ? ctx : transportContext(ctx, call, propagate), propagate, inline };
}

/**
 * The context the transport runs a guarded call in. Baggage that holds only
 * the deadline entry is left out: our headers carry it already, and a W3C
 * baggage propagator injecting it again would only encode a duplicate for us
 * to drop.
 */
function transportContext(ctx: Context, call: OutgoingCall, propagate: boolean): Context {
  // Not for this host: the guard still holds, but no propagator in the transport writes the deadline.
  if (!propagate) return withDeadlineOffWire(ctx.setValue(CALL_KEY, call));
  // Made where an earlier call to an unlisted host left its mark (a node:http response callback): this host is listed.
  return withOutgoingCall(withDeadlineOnWire(ctx), call);
}

/** The client span already covering this call, if the caller is inside one (an outer http instrumentation's). */
export function activeClientSpan(ctx: Context): Span | undefined {
  const span = trace.getSpan(ctx);
  const kind = (span as unknown as { kind?: SpanKind } | undefined)?.kind;
  return kind === SpanKind.CLIENT && span!.isRecording() ? span : undefined;
}

/**
 * A refused call never reaches a transport instrumentation, so the refusal is
 * recorded on a client span of our own, unless the caller is already inside one.
 */
export function recordRefusal(tracer: Tracer, ctx: Context, method: string, error: Error): void {
  const covering = activeClientSpan(ctx);
  const span = covering ?? tracer.startSpan(method, { kind: SpanKind.CLIENT, attributes: { 'http.request.method': method } }, ctx);
  span.setAttribute(ATTR_DEADLINE_ABORT_CODE, abortCodeOf(error));
  if (covering === undefined) endRefusedSpan(span, error);
  else span.setAttribute(ATTR_DEADLINE_OUTCOME, 'not_started');
}
