import { budgetLeft, mayStart, refusalAt } from '../call/budget';
import { SpanKind, trace, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';
import { safeExecuteInTheMiddle } from '@opentelemetry/instrumentation';
import { getDeadline, withoutDeadline } from '../../src/context';
import { CALL_KEY, withDeadlineOffWire, withDeadlineOnWire, withDeadlineWritten } from '../call/wire-context';
import { abortCodeOf } from '../../src/errors';
import { endRefusedSpan } from '../../src/open';
import { ATTR_DEADLINE_ABORT_CODE, ATTR_DEADLINE_OUTCOME } from '../../src/attributes';
import type { ResolvedConfig } from '../config';
import type { OutgoingRequestInfo } from '../types';
import { IGNORED_CALL, OutgoingCall } from './call';
import { deadlineHeaderValues, type DeadlineHeaderValues } from './deadline-headers';

export interface CallRequest {
  /** The HTTP transports; gRPC has its own client path. */
  transport: Exclude<OutgoingRequestInfo['transport'], 'grpc'>;
  method: string;
  hasBody: boolean;
  /** Computed only when `ignoreOutgoingRequest` or `propagateTo` is configured. */
  url: () => string | undefined;
  callerSignal?: AbortSignal;
  /**
   * The transport appends what a propagator inside it writes (undici, fetch), so it runs where none
   * writes the deadline or baggage again (withDeadlineWritten); node:http's propagators write by name.
   */
  appendsHeaders?: boolean;
}

export type Decision =
  | { kind: 'pass'; context?: Context }
  | { kind: 'refuse'; error: Error }
  /** `headers`: the deadline headers for the request (undefined off `propagateTo`); the transport runs in `context`. */
  | { kind: 'guard'; call: OutgoingCall; context: Context; headers: DeadlineHeaderValues | undefined };

const PASS: Decision = { kind: 'pass' };

/** Decides whether one outgoing call passes untouched (no deadline, tracing suppressed, ignored), is refused, or is guarded. */
export function beginCall(settings: ResolvedConfig, request: CallRequest, ctx: Context): Decision {
  if (isTracingSuppressed(ctx)) return PASS;
  const deadline = getDeadline(ctx);
  if (deadline === undefined) return PASS;
  if (request.callerSignal?.aborted) return PASS;
  const ignore = settings.ignoreOutgoingRequest;
  if (ignore !== undefined) {
    const info: OutgoingRequestInfo = { transport: request.transport, method: request.method, url: request.url() };
    if (safeExecuteInTheMiddle(() => ignore(info), () => {}, true) === true) {
      // Without the deadline: no propagator inside the transport writes it.
      return { kind: 'pass', context: withoutDeadline(ctx).setValue(CALL_KEY, IGNORED_CALL) };
    }
  }
  const observe = settings.mode === 'observe';
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
  const headers = propagate ? deadlineHeaderValues(ctx) : undefined;
  return { kind: 'guard', call, context: transportContext(ctx, call, propagate, request.appendsHeaders === true), headers };
}

/** The context the transport runs a guarded call in, with the call in it for the hooks inside. */
function transportContext(ctx: Context, call: OutgoingCall, propagate: boolean, appendsHeaders: boolean): Context {
  // Not for this host: the guard still holds, but no propagator in the transport writes the deadline.
  if (!propagate) return withDeadlineOffWire(ctx.setValue(CALL_KEY, call));
  // Undoes the mark an earlier call to an unlisted host may have left (a node:http response callback).
  const onWire = withDeadlineOnWire(ctx).setValue(CALL_KEY, call);
  return appendsHeaders ? withDeadlineWritten(onWire) : onWire;
}

/** The client span already covering this call, if the caller is inside one (an outer http instrumentation's). */
export function activeClientSpan(ctx: Context): Span | undefined {
  const span = trace.getSpan(ctx);
  const kind = (span as unknown as { kind?: SpanKind } | undefined)?.kind;
  return kind === SpanKind.CLIENT && span!.isRecording() ? span : undefined;
}

/** A refused call never reaches a transport instrumentation: the refusal goes on a client span of our own, unless one covers the caller. */
export function recordRefusal(tracer: Tracer, ctx: Context, method: string, error: Error): void {
  const covering = activeClientSpan(ctx);
  const span = covering ?? tracer.startSpan(method, { kind: SpanKind.CLIENT, attributes: { 'http.request.method': method } }, ctx);
  span.setAttribute(ATTR_DEADLINE_ABORT_CODE, abortCodeOf(error));
  if (covering === undefined) endRefusedSpan(span, error);
  else span.setAttribute(ATTR_DEADLINE_OUTCOME, 'not_started');
}
