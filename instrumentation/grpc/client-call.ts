import { SpanKind, type Span } from '@opentelemetry/api';
import { onDeadlineAbort, type Deadline } from '../../src/deadline';
import { abortCodeOf, DeadlineCancelledError, DeadlineExceededError, describeAbortReason } from '../../src/errors';
import { ATTR_DEADLINE_ABORT_CODE, ATTR_DEADLINE_ABORT_REASON, ATTR_DEADLINE_OUTCOME } from '../../src/attributes';
import { ATTR_DEADLINE_WOULD_ABORT } from '../names';
import {
  GRPC_CANCELLED,
  GRPC_DEADLINE_EXCEEDED,
  type CallListener,
  type ChannelCall,
  type GrpcMetadata,
  type GrpcStatus,
} from './grpc-types';
import { endRpcSpan } from './spans';
import { markStatusWith } from './status-error';

/**
 * grpc-js ends a call at the deadline we clamped it to with a timer of its
 * own, set through Date.now() and millisecond timers, which can fire a
 * millisecond or two before our monotonic cutoff. A DEADLINE_EXCEEDED that
 * arrives with more than this left is not our cutoff (a server's own limit).
 */
const OWN_TIMER_SLACK_MS = 5;

const NONE: unique symbol = Symbol('not aborted by us');

export interface ClientGuardInit {
  deadline: Deadline;
  /** `grpc /package.Service/Method`: the operation named by the errors this guard makes. */
  operation: string;
  observe: boolean;
  /** True when the call's `deadline` was set to our cutoff (its own was later or absent). */
  clampedByUs: boolean;
  /** Where the outcome is recorded: instrumentation-grpc's client span, or ours. */
  span: Span | undefined;
  /** True when `span` is ours to end. */
  ownSpan: boolean;
  /** The channel's target: what getPeer() says while no stream is open. */
  target: string;
  /** Writes the deadline metadata into the call's outgoing metadata. */
  inject(metadata: GrpcMetadata): void;
}

/**
 * The deadline guard of one gRPC client call. It subscribes to the deadline
 * when the call starts and unsubscribes when the call's status arrives, so it
 * lives exactly as long as the call: past the scope that started it, and no
 * longer. At the cutoff it cancels the call with DEADLINE_EXCEEDED; on a
 * cancellation upstream, with CANCELLED. The status of a call it ended (or
 * that grpc-js ended at the cutoff it was clamped to) carries our error as
 * `cause` and our brand, so the caller's error satisfies `isDeadlineError`.
 */
export class GrpcClientGuard {
  private unsubscribe: (() => void) | undefined;
  private ended = false;
  private reason: unknown = NONE;
  private sentAtAbort = false;

  constructor(
    private readonly call: ChannelCall,
    private readonly init: ClientGuardInit,
  ) {}

  start(originalStart: ChannelCall['start'], metadata: GrpcMetadata, listener: CallListener): void {
    this.init.inject(metadata);
    originalStart.call(this.call, metadata, {
      onReceiveMetadata: (received) => listener.onReceiveMetadata(received),
      onReceiveMessage: (message) => listener.onReceiveMessage(message),
      onReceiveStatus: (status) => {
        this.onStatus(status);
        listener.onReceiveStatus(status);
      },
    });
    // After start: a cancel needs a started call. Runs at once if already aborted.
    if (!this.ended) this.unsubscribe = onDeadlineAbort(this.init.deadline, (reason) => this.onAbort(reason));
    if (this.ended) this.detach();
  }

  /** True once the call may have reached the server: grpc-js reports a peer only once a stream exists. */
  private mayHaveSent(): boolean {
    const peer = this.call.getPeer();
    return peer !== this.init.target && peer !== 'unknown';
  }

  private onAbort(reason: unknown): void {
    if (this.ended) return;
    if (this.init.observe) {
      this.record({ [ATTR_DEADLINE_WOULD_ABORT]: true });
      return this.detach();
    }
    // A caller's own cancellation reason is kept as the cause of ours, as on HTTP.
    this.reason = abortCodeOf(reason) === 'CANCELLED' && !(reason instanceof DeadlineCancelledError) ? new DeadlineCancelledError(this.init.operation, reason) : reason;
    this.sentAtAbort = this.mayHaveSent();
    const code = abortCodeOf(reason) === 'CANCELLED' ? GRPC_CANCELLED : GRPC_DEADLINE_EXCEEDED;
    this.call.cancelWithStatus(code, describeAbortReason(this.reason));
  }

  private onStatus(status: GrpcStatus): void {
    if (this.ended) return;
    this.ended = true;
    this.detach();
    const { deadline, observe, span } = this.init;
    let reason = this.reason;
    let sent = this.sentAtAbort;
    if (reason === NONE && !observe && this.init.clampedByUs && status.code === GRPC_DEADLINE_EXCEEDED && deadline.remainingMs() <= OWN_TIMER_SLACK_MS) {
      const abortReason = deadline.aborted ? deadline.abortReason : undefined;
      reason = abortCodeOf(abortReason) === 'DEADLINE_EXCEEDED' ? abortReason : new DeadlineExceededError(this.init.operation, deadline.expiresAtMs);
      sent = this.mayHaveSent();
    }
    if (reason !== NONE && (status.code === GRPC_DEADLINE_EXCEEDED || status.code === GRPC_CANCELLED)) {
      markStatusWith(status, reason);
      const code = abortCodeOf(reason);
      // As for an HTTP POST: once the request may have reached the server, its effect is unknown.
      const outcome = sent ? 'unknown' : code === 'CANCELLED' ? 'cancelled' : 'expired';
      this.record({ [ATTR_DEADLINE_OUTCOME]: outcome, [ATTR_DEADLINE_ABORT_CODE]: code, [ATTR_DEADLINE_ABORT_REASON]: describeAbortReason(reason) });
    } else if (observe && deadline.remainingMs() <= 0) {
      this.record({ [ATTR_DEADLINE_WOULD_ABORT]: true });
    }
    if (this.init.ownSpan && span !== undefined) endRpcSpan(span, status.code, SpanKind.CLIENT);
  }

  private detach(): void {
    this.unsubscribe?.();
    this.unsubscribe = undefined;
  }

  private record(attributes: Record<string, string | boolean>): void {
    this.init.span?.setAttributes(attributes);
  }
}
