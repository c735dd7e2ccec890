import { errorMonitor } from 'node:events';
import { SpanKind, type Span } from '@opentelemetry/api';
import type { DeadlineNode } from '../../src/deadline-node';
import { abortCodeOf, DeadlineCancelledError, DeadlineExceededError, describeAbortReason } from '../../src/errors';
import { ATTR_DEADLINE_ABORT_CODE, ATTR_DEADLINE_ABORT_REASON, ATTR_DEADLINE_OUTCOME } from '../../src/attributes';
import { ATTR_DEADLINE_WOULD_ABORT } from '../names';
import { deadlineEpochMs, GRPC_CANCELLED, GRPC_DEADLINE_EXCEEDED, GRPC_OK, type HandlerKind, type ServerCallback, type ServerCallLike } from './grpc-types';
import { isStreamingResponse, restateStreamError, restatingCallback } from './forwarded-status';
import { endRpcSpan } from './spans';

/** grpc-js's UNKNOWN: what it sends for an error without a numeric code. */
const GRPC_UNKNOWN = 2;

/** The gRPC status an error given to a handler's callback or stream ends the call with, as grpc-js derives it. */
export function statusCodeOf(error: unknown): number {
  if (error === null || error === undefined) return GRPC_OK;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'number' && Number.isInteger(code) ? code : GRPC_UNKNOWN;
}

export interface ServerCallInit {
  call: ServerCallLike;
  kind: HandlerKind;
  deadline: DeadlineNode;
  operation: string;
  span: Span;
  ownSpan: boolean;
  observe: boolean;
}

/**
 * Ties the deadline of one incoming call to that call's life: a cancel
 * (the client cancelled, or the stream was reset) aborts it with CANCELLED;
 * the end of the call (its callback, or the end of its response stream)
 * disposes it and ends a span of our own. Every listener it adds comes off
 * when the call ends.
 */
export class ServerCallLifecycle {
  private finished = false;
  private errorCode: number | undefined;
  private readonly streaming: boolean;
  // Bound once per call; `on` rather than `once`, which would wrap each of them again.
  private readonly onCancelled = (): void => this.cancelled();
  private readonly onFinish: (() => void) | undefined;
  private readonly onError: ((error: unknown) => void) | undefined;

  constructor(private readonly init: ServerCallInit) {
    const { call, kind } = init;
    call.on('cancelled', this.onCancelled);
    this.streaming = isStreamingResponse(kind);
    if (this.streaming) {
      this.onFinish = () => this.finish(this.errorCode ?? GRPC_OK);
      this.onError = (error) => {
        this.errorCode ??= statusCodeOf(error);
        restateStreamError(error);
      };
      call.on('finish', this.onFinish);
      // errorMonitor: watching errors without counting as their handler.
      call.on(errorMonitor, this.onError);
    }
  }

  /** The callback of a unary or client-streaming handler, which ends the call (and restates a forwarded refusal marker). */
  wrapCallback(callback: ServerCallback | undefined): ServerCallback | undefined {
    if (typeof callback !== 'function') return callback;
    const restating = restatingCallback(callback);
    return (error, value, trailer, flags) => {
      this.finish(statusCodeOf(error));
      return restating(error, value, trailer, flags);
    };
  }

  /** The handler threw: grpc-js answers UNKNOWN. */
  handlerThrew(): void {
    this.finish(GRPC_UNKNOWN);
  }

  private cancelled(): void {
    const { call, deadline, span, observe, operation } = this.init;
    if (observe) {
      span.setAttribute(ATTR_DEADLINE_WOULD_ABORT, true);
      return this.finish(GRPC_CANCELLED);
    }
    // Reading `aborted` checks the clock: past the cutoff it aborts with DeadlineExceededError itself.
    if (!deadline.aborted) {
      // grpc-js's own deadline timer (set from the same grpc-timeout, in whole ms) can end the call a moment before ours.
      const grpcDeadlinePassed = deadlineEpochMs(call.getDeadline()) <= Date.now();
      deadline.abort(
        grpcDeadlinePassed ? new DeadlineExceededError(operation, deadline.expiresAtMs) : new DeadlineCancelledError(operation, 'client cancelled'),
      );
    }
    const reason = deadline.abortReason;
    const code = abortCodeOf(reason);
    span.setAttributes({
      [ATTR_DEADLINE_OUTCOME]: code === 'CANCELLED' ? 'cancelled' : 'expired',
      [ATTR_DEADLINE_ABORT_CODE]: code,
      [ATTR_DEADLINE_ABORT_REASON]: describeAbortReason(reason),
    });
    this.finish(code === 'CANCELLED' ? GRPC_CANCELLED : GRPC_DEADLINE_EXCEEDED);
  }

  private finish(code: number): void {
    if (this.finished) return;
    this.finished = true;
    const { call, deadline, span, observe } = this.init;
    call.removeListener('cancelled', this.onCancelled);
    if (this.streaming) {
      call.removeListener('finish', this.onFinish!);
      call.removeListener(errorMonitor, this.onError!);
    }
    if (observe && deadline.expired) span.setAttribute(ATTR_DEADLINE_WOULD_ABORT, true);
    deadline.dispose();
    if (this.init.ownSpan) endRpcSpan(span, code, SpanKind.SERVER);
  }
}
