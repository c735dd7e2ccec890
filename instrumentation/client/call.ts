import type { Deadline } from '../../src/deadline';
import { CallGuard } from '../call/guard';

/** The call marker for a call that `ignoreOutgoingRequest` excluded: no headers, no guard. */
export const IGNORED_CALL: unique symbol = Symbol('ignored outgoing call');

/** Methods that normally carry no body; PUT is idempotent but nearly always carries one. */
const NO_BODY_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'DELETE']);

/** What a call is made with; `callerSignal` is the caller's own signal, for transports that take one combined signal. */
export interface CallInit {
  deadline: Deadline;
  observe: boolean;
  transport: 'fetch' | 'undici' | 'http';
  method: string;
  hasBody: boolean;
  callerSignal?: AbortSignal;
}

/** The deadline guard of one outgoing HTTP call: it writes the outcome on the spans it was shown before it aborts the transport, which then ends them. */
export class OutgoingCall extends CallGuard {
  readonly transport: CallInit['transport'];
  readonly method: string;
  hasBody: boolean;
  /** True once the request may have reached the server (its connection was up and it was being written). */
  sent = false;
  settled = false;
  /**
   * False while the undici channel has tied no request to this call (one that waited in a dispatcher's
   * queue is created later, in another call's context: see connectionContexts in channels.ts). The
   * transport wrapper then keeps the call armed past its API's result by other means.
   */
  hasTiedRequest = false;
  private readonly callerSignal: AbortSignal | undefined;
  /** What armFor was given: it stops the transport. Dropped once settled: the call may outlive its request in a context. */
  private stop: ((reason: unknown) => void) | undefined;
  private openRequests = 0;
  private apiDone = false;

  constructor(init: CallInit) {
    super(init.deadline, init.observe);
    this.transport = init.transport;
    this.method = init.method;
    this.hasBody = init.hasBody;
    this.callerSignal = init.callerSignal;
  }

  /** Calls `stop(reason)` at the cutoff or when the caller's signal aborts, whichever comes first, unless the call settles before. */
  armFor(stop: (reason: unknown) => void): void {
    if (this.settled) return;
    this.stop = stop;
    this.arm(this.callerSignal);
  }

  protected cut(reason: unknown): void {
    const stop = this.stop!;
    this.settle();
    // A request that may have been received and had an effect (a body, or a method that usually has one).
    this.recordAbort(reason, this.sent && (this.hasBody || !NO_BODY_METHODS.has(this.method)));
    stop(reason);
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
    this.stop = undefined;
    this.end();
  }
}
