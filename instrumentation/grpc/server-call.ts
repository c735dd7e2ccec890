import { errorMonitor, EventEmitter } from 'node:events';
import { SpanKind, type Span } from '@opentelemetry/api';
import type { DeadlineNode } from '../../src/deadline-node';
import { abortCodeOf, DeadlineCancelledError, DeadlineExceededError } from '../../src/errors';
import { ATTR_DEADLINE_WOULD_ABORT, HEADER_DEADLINE_EXPIRED } from '../names';
import { callerGone } from '../server/admission';
import { FORWARDED_MARKER_VALUE } from '../server/forwarded-marker';
import { deadlineEpochMs, GRPC_CANCELLED, GRPC_DEADLINE_EXCEEDED, GRPC_OK, type GrpcMetadata, type ServerCallback, type ServerCallLike } from './grpc-types';
import { endRpcSpan } from './spans';

/** The operation name of the deadline a gRPC handler runs under. */
export const GRPC_SERVER_OPERATION = 'grpc.server';

/** grpc-js's UNKNOWN: what it sends for an error without a numeric code. */
const GRPC_UNKNOWN = 2;

/** The gRPC status an error given to a handler's callback or stream ends the call with, as grpc-js derives it. */
function statusCodeOf(error: unknown): number {
  if (error === null || error === undefined) return GRPC_OK;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'number' && Number.isInteger(code) ? code : GRPC_UNKNOWN;
}

type MetadataLike = GrpcMetadata & { clone(): GrpcMetadata };

/**
 * A copy of `metadata` with the refusal marker restated (FORWARDED_MARKER_VALUE), or undefined when it has
 * none: a handler that passes on its callee's error passes on that callee's trailers, marker included.
 */
function restated(metadata: unknown): GrpcMetadata | undefined {
  const candidate = metadata as Partial<MetadataLike> | null | undefined;
  if (typeof candidate?.get !== 'function' || typeof candidate.clone !== 'function') return undefined;
  if (candidate.get(HEADER_DEADLINE_EXPIRED).length === 0) return undefined;
  const copy = candidate.clone();
  copy.set(HEADER_DEADLINE_EXPIRED, FORWARDED_MARKER_VALUE);
  return copy;
}

/**
 * Adds a listener with EventEmitter's own method. instrumentation-grpc binds each server call to its context, so
 * `call.on` would wrap the listener in a closure that restores a context, and these listeners need none.
 */
function listenDirectly(call: ServerCallLike, event: string | symbol, listener: (error: unknown) => void): void {
  if (call instanceof EventEmitter) EventEmitter.prototype.on.call(call, event, listener);
  else call.on(event, listener);
}

/**
 * One incoming call from its handler's start to its end: what the handler sends has a forwarded refusal
 * marker restated. With a deadline of ours, a cancel (by the client, or a stream reset) aborts it, and the
 * end of the call (its callback, or the end of its response stream) disposes it and ends a span of our own.
 */
export class ServerCallWatch {
  private finished = false;
  private errorCode: number | undefined;
  private readonly onCancelled = (): void => this.cancelled();
  /** A streaming call's end and errors; a unary call ends through its callback. */
  private readonly onFinish: (() => void) | undefined;
  private readonly onError: ((error: unknown) => void) | undefined;

  /** With a deadline of ours (`deadline`): the span it records on, which is ours to end when `ownSpan`. */
  constructor(
    private readonly call: ServerCallLike,
    streaming: boolean,
    private readonly deadline?: DeadlineNode,
    private readonly span?: Span,
    private readonly ownSpan = false,
    private readonly observe = false,
  ) {
    listenDirectly(call, 'cancelled', this.onCancelled);
    if (!streaming) return;
    listenDirectly(call, 'finish', (this.onFinish = () => this.finish(this.errorCode ?? GRPC_OK)));
    listenDirectly(call, errorMonitor, (this.onError = (error) => this.sawError(error)));
  }

  /** Seen through errorMonitor, before grpc-js's own listener turns the error into the status. */
  private sawError(error: unknown): void {
    this.errorCode ??= statusCodeOf(error);
    const fixed = typeof error === 'object' && error !== null ? restated((error as { metadata?: unknown }).metadata) : undefined;
    if (fixed === undefined) return;
    try {
      (error as { metadata: unknown }).metadata = fixed;
    } catch {
      // A frozen error: grpc-js will send its trailers as they are.
    }
  }

  /**
   * The callback of a unary or client-streaming handler, which ends the call.
   * grpc-js sends `trailer ?? error.metadata` as the trailers: a restated copy
   * goes in as `trailer`, so the handler's error object is left as it is.
   */
  wrapCallback(callback: ServerCallback | undefined): ServerCallback | undefined {
    if (typeof callback !== 'function') return callback;
    return (error, value, trailer, flags) => {
      this.finish(statusCodeOf(error));
      if (error === null || error === undefined) return callback(error, value, trailer, flags);
      return callback(error, value, restated(trailer ?? (error as { metadata?: unknown }).metadata) ?? trailer, flags);
    };
  }

  /** The handler threw: grpc-js answers UNKNOWN. */
  handlerThrew(): void {
    this.finish(GRPC_UNKNOWN);
  }

  private cancelled(): void {
    const { deadline } = this;
    if (deadline === undefined || this.observe) {
      this.span?.setAttribute(ATTR_DEADLINE_WOULD_ABORT, true);
      return this.finish(GRPC_CANCELLED);
    }
    callerGone(deadline, this.span, () =>
      // grpc-js's own deadline timer (set from the same grpc-timeout, in whole ms) can end the call a moment before ours.
      deadlineEpochMs(this.call.getDeadline()) <= Date.now()
        ? new DeadlineExceededError(GRPC_SERVER_OPERATION, deadline.expiresAtMs)
        : new DeadlineCancelledError(GRPC_SERVER_OPERATION, 'client cancelled'),
    );
    this.finish(abortCodeOf(deadline.abortReason) === 'CANCELLED' ? GRPC_CANCELLED : GRPC_DEADLINE_EXCEEDED);
  }

  private finish(code: number): void {
    if (this.finished) return;
    this.finished = true;
    const { call, deadline, span } = this;
    call.removeListener('cancelled', this.onCancelled);
    if (this.onFinish !== undefined) call.removeListener('finish', this.onFinish);
    if (this.onError !== undefined) call.removeListener(errorMonitor, this.onError);
    if (deadline === undefined) return;
    if (this.observe && deadline.expired) span?.setAttribute(ATTR_DEADLINE_WOULD_ABORT, true);
    deadline.dispose();
    if (this.ownSpan && span !== undefined) endRpcSpan(span, code, SpanKind.SERVER);
  }
}
