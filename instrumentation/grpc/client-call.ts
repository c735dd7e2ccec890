import { SpanKind, type Span } from '@opentelemetry/api';
import { onDeadlineAbort, type Deadline } from '../../src/deadline';
import { abortCodeOf, DeadlineCancelledError, DeadlineExceededError, describeAbortReason } from '../../src/errors';
import { ATTR_DEADLINE_ABORT_CODE, ATTR_DEADLINE_ABORT_REASON, ATTR_DEADLINE_OUTCOME } from '../../src/attributes';
import { errorFromClaim } from '../call/reject-claim';
import { ATTR_DEADLINE_WOULD_ABORT } from '../names';
import {
  GRPC_CANCELLED,
  GRPC_DEADLINE_EXCEEDED,
  type CallListener,
  type ChannelCall,
  type GrpcChannel,
  type GrpcMetadata,
  type GrpcStatus,
} from './grpc-types';
import { refusalClaimOf } from './refusal';
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
  /** `/package.Service/Method`. */
  method: string;
  observe: boolean;
  /** True when the call's `deadline` was set to our cutoff (its own was later or absent). */
  clampedByUs: boolean;
  /** Where the outcome is recorded: instrumentation-grpc's client span, or ours. */
  span: Span | undefined;
  /** True when `span` is ours to end. */
  ownSpan: boolean;
  /** The channel the call was made on: its target is what getPeer() says while no stream is open. */
  channel: GrpcChannel;
  /** Writes the deadline metadata into the call's outgoing metadata. */
  inject(metadata: GrpcMetadata): void;
  /** Whether to believe this peer's refusal (`trustReply`); asked only for a status that claims one. */
  trustsRefusal(): boolean;
  /** Empty grpc-js Metadata, for a status this guard reports itself. */
  newMetadata(): GrpcMetadata;
}

/**
 * One gRPC client call under a deadline: it stands between grpc-js's client
 * layer and the call `Channel#createCall` made, passing everything through,
 * and is itself the listener that call reports to. (A wrapper, not a patch of
 * the call object: grpc-js's call objects keep their shape.)
 *
 * It subscribes to the deadline when the call starts and unsubscribes when
 * the call's status arrives, so the guard lives exactly as long as the call:
 * past the scope that started it, and no longer. At the cutoff it cancels the
 * call with DEADLINE_EXCEEDED; on a cancellation upstream, with CANCELLED. The
 * status of a call it ended (or that grpc-js ended at the cutoff it was
 * clamped to) carries our error as `cause` and our brand, so the caller's
 * error satisfies `isDeadlineError`.
 */
export class GuardedCall implements ChannelCall, CallListener {
  private listener: CallListener | undefined;
  /** True while this call watches its deadline. */
  private watching = false;
  private stopWatching: (() => void) | undefined;
  private ended = false;
  private reason: unknown = NONE;
  private sentAtAbort = false;

  constructor(
    private readonly call: ChannelCall,
    private readonly init: ClientGuardInit,
  ) {}

  start(metadata: GrpcMetadata, listener: CallListener): void {
    this.listener = listener;
    const { deadline, observe } = this.init;
    if (!observe && deadline.aborted) return this.endBeforeStart(deadline.abortReason);
    this.init.inject(metadata);
    this.call.start(metadata, this);
    // After start: a cancel needs a started call. Runs at once if already aborted.
    if (!this.ended) {
      this.watching = true;
      this.stopWatching = onDeadlineAbort(this.init.deadline, (reason) => this.onDeadlineAbort(reason));
    }
    if (this.ended) this.detach();
  }

  onReceiveMetadata(metadata: GrpcMetadata): void {
    this.listener!.onReceiveMetadata(metadata);
  }

  onReceiveMessage(message: unknown): void {
    this.listener!.onReceiveMessage(message);
  }

  onReceiveStatus(status: GrpcStatus): void {
    this.onStatus(status);
    this.listener!.onReceiveStatus(status);
  }

  cancelWithStatus(code: number, details: string): void {
    this.call.cancelWithStatus(code, details);
  }

  getPeer(): string {
    return this.call.getPeer();
  }

  sendMessageWithContext(context: unknown, message: Buffer): void {
    this.call.sendMessageWithContext(context, message);
  }

  startRead(): void {
    this.call.startRead();
  }

  halfClose(): void {
    this.call.halfClose();
  }

  getCallNumber(): number {
    return this.call.getCallNumber();
  }

  setCredentials(credentials: unknown): void {
    this.call.setCredentials(credentials);
  }

  getAuthContext(): unknown {
    return this.call.getAuthContext?.() ?? null;
  }

  /** The operation named by the errors this guard makes (built only when one is). */
  private get operation(): string {
    return `grpc ${this.init.method}`;
  }

  /** True once the call may have reached the server: grpc-js reports a peer only once a stream exists. */
  private mayHaveSent(): boolean {
    const peer = this.call.getPeer();
    return peer !== this.init.channel.getTarget() && peer !== 'unknown';
  }

  /**
   * A call started after its deadline aborted (an interceptor held its start
   * back): nothing is sent. grpc-js may already have ended the call at the
   * deadline it was clamped to, with no listener yet to tell, so the status
   * is reported from here, on the next tick as grpc-js reports one.
   */
  private endBeforeStart(reason: unknown): void {
    this.reason = this.reasonFor(reason);
    const code = abortCodeOf(reason) === 'CANCELLED' ? GRPC_CANCELLED : GRPC_DEADLINE_EXCEEDED;
    const status = { code, details: describeAbortReason(this.reason), metadata: this.init.newMetadata() };
    this.call.cancelWithStatus(code, status.details);
    process.nextTick(() => this.onReceiveStatus(status));
  }

  /** The error this call ends with: a caller's own cancellation reason is kept as the cause of ours, as on HTTP. */
  private reasonFor(reason: unknown): unknown {
    return abortCodeOf(reason) === 'CANCELLED' && !(reason instanceof DeadlineCancelledError) ? new DeadlineCancelledError(this.operation, reason) : reason;
  }

  private onDeadlineAbort(reason: unknown): void {
    if (this.ended) return;
    if (this.init.observe) {
      this.record({ [ATTR_DEADLINE_WOULD_ABORT]: true });
      return this.detach();
    }
    this.reason = this.reasonFor(reason);
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
    const claim = reason === NONE ? refusalClaimOf(status) : undefined;
    const believed = claim !== undefined && this.init.trustsRefusal();
    if (believed) {
      // The server refused before running anything: the call never started there.
      markStatusWith(status, errorFromClaim(this.operation, deadline, claim));
      this.record({ [ATTR_DEADLINE_OUTCOME]: 'not_started', [ATTR_DEADLINE_ABORT_CODE]: claim.code });
    } else if (reason === NONE && !observe && this.init.clampedByUs && status.code === GRPC_DEADLINE_EXCEEDED && deadline.remainingMs() <= OWN_TIMER_SLACK_MS) {
      const abortReason = deadline.aborted ? deadline.abortReason : undefined;
      reason = abortCodeOf(abortReason) === 'DEADLINE_EXCEEDED' ? abortReason : new DeadlineExceededError(this.operation, deadline.expiresAtMs);
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
    } else if (!believed && !observe && status.code === GRPC_DEADLINE_EXCEEDED && this.mayHaveSent()) {
      // A deadline ran out past this hop (the server's own, or a callee's passed on by its handler,
      // whose marker the server restates): the server may have done work, so nothing is known.
      this.record({ [ATTR_DEADLINE_OUTCOME]: 'unknown' });
    }
    if (this.init.ownSpan && span !== undefined) endRpcSpan(span, status.code, SpanKind.CLIENT);
  }

  private detach(): void {
    if (!this.watching) return;
    this.watching = false;
    this.stopWatching?.();
    this.stopWatching = undefined;
  }

  private record(attributes: Record<string, string | boolean>): void {
    this.init.span?.setAttributes(attributes);
  }
}

/**
 * Methods a grpc-js call has that GuardedCall does not name (a later 1.x
 * adding one to its call interface) are passed through too, added once from
 * the first call seen.
 */
export function delegateUnknownMethods(call: object): void {
  const target = GuardedCall.prototype as unknown as Record<string, unknown>;
  for (let proto = Object.getPrototypeOf(call); proto !== null && proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
    for (const name of Object.getOwnPropertyNames(proto)) {
      if (name === 'constructor' || name in target || typeof (proto as Record<string, unknown>)[name] !== 'function') continue;
      target[name] = function (this: { call: Record<string, (...args: unknown[]) => unknown> }, ...args: unknown[]) {
        return this.call[name](...args);
      };
    }
  }
}
