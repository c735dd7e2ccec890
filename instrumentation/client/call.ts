import type { Span } from '@opentelemetry/api';
import { CALL_KEY as OUTGOING_CALL_KEY } from '../call/wire-context';
import type { Deadline } from '../../src/deadline';
import { CallGuard } from '../call/guard';

/** The call being made, visible to hooks that run inside the transport (request hooks, channels) and to the propagator. */
export const CALL_KEY = OUTGOING_CALL_KEY;
/** CALL_KEY's value for a call that `ignoreOutgoingRequest` excluded: no headers, no guard. */
export const IGNORED_CALL: unique symbol = Symbol('ignored outgoing call');

/** Methods that normally carry no body; PUT is idempotent but nearly always carries one. */
const NO_BODY_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'DELETE']);

/** POST, PATCH or any request carrying a body may have had an effect once it was written. */
function isNonIdempotent(method: string, hasBody: boolean): boolean {
  return hasBody || !NO_BODY_METHODS.has(method);
}

/** What a call is made with; `callerSignal` is the caller's own signal, for transports that take one combined signal. */
export type CallInit = Pick<OutgoingCall, 'deadline' | 'transport' | 'method' | 'hasBody' | 'observe'> & { callerSignal?: AbortSignal };

/** The deadline guard of one outgoing HTTP call: it writes the outcome on the spans it was shown before it aborts the transport, which then ends them. */
export class OutgoingCall {
  readonly deadline: Deadline;
  readonly observe: boolean;
  readonly transport: 'fetch' | 'undici' | 'http';
  readonly method: string;
  hasBody: boolean;
  /** True once the request may have reached the server (its connection was up and it was being written). */
  sent = false;
  settled = false;
  /** True once the call ended on its own (response and body all in), not by an abort. */
  completed = false;
  /**
   * False while the undici channel has tied no request to this call (one that waited in a dispatcher's
   * queue is created later, in another call's context: see connectionContexts in channels.ts). The
   * transport wrapper then keeps the call armed past its API's result by other means.
   */
  hasTiedRequest = false;
  private readonly guard: CallGuard;
  private readonly callerSignal: AbortSignal | undefined;
  private openRequests = 0;
  private apiDone = false;

  constructor(init: CallInit) {
    this.guard = new CallGuard(init.deadline, init.observe);
    this.deadline = init.deadline;
    this.observe = init.observe;
    this.transport = init.transport;
    this.method = init.method;
    this.hasBody = init.hasBody;
    this.callerSignal = init.callerSignal;
  }

  /** Shows the call a client span of the transport; the outcome goes on it. */
  addSpan(span: Span): void {
    this.guard.addSpan(span);
  }

  /** Observe mode: records that enforce mode would have refused this call. */
  markWouldReject(): void {
    this.guard.markWouldReject();
  }

  /** Calls `action(reason)` at the cutoff or when the caller's signal aborts, whichever comes first, unless the call settles before. */
  arm(action: (reason: unknown) => void): void {
    if (this.settled) return;
    this.guard.arm((reason) => {
      this.settled = true;
      this.guard.recordAbort(reason, this.sent && isNonIdempotent(this.method, this.hasBody));
      action(reason);
    }, this.callerSignal);
  }

  /** The server rejected the request on arrival: it never started. */
  markRejectedByServer(): void {
    this.guard.recordNotStarted();
  }

  requestOpened(): void {
    this.openRequests++;
    this.hasTiedRequest = true;
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

  settle(): void {
    if (this.settled) return;
    this.settled = true;
    this.completed = true;
    this.guard.end();
  }
}
