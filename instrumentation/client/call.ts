import type { Span } from '@opentelemetry/api';
import { OUTGOING_CALL_KEY, type DeadlineHeaderWriter } from '../../src/context';
import { onDeadlineAbort, type Deadline } from '../../src/deadline';
import { abortCodeOf, describeAbortReason } from '../../src/errors';
import {
  ATTR_DEADLINE_ABORT_CODE,
  ATTR_DEADLINE_ABORT_REASON,
  ATTR_DEADLINE_OUTCOME,
  type DeadlineOutcome,
} from '../../src/attributes';
import { ATTR_DEADLINE_WOULD_ABORT, ATTR_DEADLINE_WOULD_REJECT } from '../names';

/** The call being made, visible to hooks that run inside the transport (request hooks, channels) and to the propagator. */
export const CALL_KEY = OUTGOING_CALL_KEY;
/** CALL_KEY's value for a call that `ignoreOutgoingRequest` excluded: no headers, no guard. */
export const IGNORED_CALL: unique symbol = Symbol('ignored outgoing call');

/** Methods that normally carry no body; PUT is idempotent but nearly always carries one. */
const NO_BODY_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'DELETE']);

/** POST, PATCH or any request carrying a body may have had an effect once it was written. */
export function isNonIdempotent(method: string, hasBody: boolean): boolean {
  return hasBody || !NO_BODY_METHODS.has(method);
}

export interface CallInit {
  deadline: Deadline;
  transport: 'fetch' | 'undici' | 'http';
  method: string;
  hasBody: boolean;
  observe: boolean;
  /** The caller's own signal, for transports that take one combined signal. */
  callerSignal?: AbortSignal;
}

/**
 * The deadline bookkeeping of one outgoing call made under an active deadline.
 *
 * It subscribes to the deadline's abort (without creating its AbortSignal)
 * and listens to the caller's signal, when it owns the combination, only
 * between `arm` and `settle`, so no subscription outlives the call. It writes the outcome on the transport's client spans that it has
 * been shown (`addSpan`) before it aborts the transport, so the spans carry
 * it when the transport ends them.
 */
export class OutgoingCall implements DeadlineHeaderWriter {
  readonly deadline: Deadline;
  readonly transport: CallInit['transport'];
  readonly method: string;
  readonly observe: boolean;
  hasBody: boolean;
  /** True once the request may have reached the server (its connection was up and it was being written). */
  sent = false;
  settled = false;
  /** True once the call ended on its own (response and body all in), not by an abort. */
  completed = false;
  /** Set by the transport wrapper around its synchronous dispatch of a request carrying our headers (see isWritingDeadlineHeaders). */
  writingDeadlineHeaders = false;
  private readonly callerSignal: AbortSignal | undefined;
  private spans: Span[] | undefined;
  private abortAction: ((reason: unknown) => void) | undefined;
  private attributes: Record<string, string | boolean> | undefined;
  private openRequests = 0;
  private requestsTied = 0;
  private apiDone = false;
  private unsubscribe: (() => void) | undefined;
  private onCallerAbort: (() => void) | undefined;

  constructor(init: CallInit) {
    this.deadline = init.deadline;
    this.transport = init.transport;
    this.method = init.method;
    this.hasBody = init.hasBody;
    this.observe = init.observe;
    this.callerSignal = init.callerSignal;
  }

  /** Shows the call a client span of the transport; the outcome goes on it. */
  addSpan(span: Span): void {
    if (this.spans === undefined) this.spans = [span];
    else if (!this.spans.includes(span)) this.spans.push(span);
    if (this.attributes !== undefined) span.setAttributes(this.attributes);
  }

  /** Observe mode: records that enforce mode would have refused this call. */
  markWouldReject(): void {
    this.record({ [ATTR_DEADLINE_WOULD_REJECT]: true });
  }

  /**
   * Calls `action(reason)` at the cutoff or when the caller's signal aborts,
   * whichever comes first, unless the call settles before. Observe mode only
   * records `deadline.would_abort` then, while the transport span is still open.
   */
  arm(action: (reason: unknown) => void): void {
    if (this.settled) return;
    this.abortAction = this.observe ? () => this.record({ [ATTR_DEADLINE_WOULD_ABORT]: true }) : action;
    // Called back at once if the deadline has already aborted.
    const stop = onDeadlineAbort(this.deadline, (reason) => this.abortWith(reason));
    if (this.abortAction === undefined) return stop();
    this.unsubscribe = stop;
    const callerSignal = this.callerSignal;
    if (callerSignal === undefined) return;
    this.onCallerAbort = () => this.abortWith(callerSignal.reason);
    callerSignal.addEventListener('abort', this.onCallerAbort);
  }

  /** The server rejected the request on arrival: it never started. */
  markRejectedByServer(): void {
    this.record({ [ATTR_DEADLINE_OUTCOME]: 'not_started' });
  }

  requestOpened(): void {
    this.openRequests++;
    this.requestsTied++;
  }

  /**
   * False while the undici channel has tied no request to this call: one that
   * waited in a dispatcher's queue is created later, in another call's context,
   * and cannot be told apart there (see connectionContexts in channels.ts). The
   * transport wrapper then keeps the call armed past its API's result by other means.
   */
  get hasTiedRequest(): boolean {
    return this.requestsTied > 0;
  }

  requestClosed(): void {
    if (this.openRequests > 0) this.openRequests--;
    if (this.apiDone && this.openRequests === 0) this.settle();
  }

  /** The API call returned or failed; the call settles once its requests are closed too. */
  apiSettled(): void {
    this.apiDone = true;
    if (this.openRequests === 0) this.settle();
  }

  /** Detaches every listener. In observe mode, records whether the cutoff passed while in flight. */
  settle(): void {
    if (this.settled) return;
    this.settled = true;
    this.completed = true;
    this.detach();
    if (this.observe && this.deadline.remainingMs() <= 0) this.record({ [ATTR_DEADLINE_WOULD_ABORT]: true }); // timer not run yet
  }

  private abortWith(reason: unknown): void {
    if (this.settled) return;
    const action = this.abortAction;
    if (this.observe) {
      this.detach();
      return action?.(reason);
    }
    this.settled = true;
    this.detach();
    const code = abortCodeOf(reason);
    let outcome: DeadlineOutcome = code === 'CANCELLED' ? 'cancelled' : 'expired';
    if (this.sent && isNonIdempotent(this.method, this.hasBody)) outcome = 'unknown';
    this.record({
      [ATTR_DEADLINE_OUTCOME]: outcome,
      [ATTR_DEADLINE_ABORT_CODE]: code,
      [ATTR_DEADLINE_ABORT_REASON]: describeAbortReason(reason),
    });
    action?.(reason);
  }

  private detach(): void {
    if (this.abortAction === undefined) return;
    this.abortAction = undefined;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    if (this.onCallerAbort !== undefined) this.callerSignal?.removeEventListener('abort', this.onCallerAbort);
    this.onCallerAbort = undefined;
  }

  private record(attributes: Record<string, string | boolean>): void {
    this.attributes = { ...this.attributes, ...attributes };
    if (this.spans !== undefined) for (const span of this.spans) span.setAttributes(attributes);
  }
}
