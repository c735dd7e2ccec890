import { SpanKind, type Context, type Span } from '@opentelemetry/api';
import { onDeadlineAbort, type Deadline } from '../../src/deadline';
import { abortCodeOf, DeadlineCancelledError, DeadlineExceededError, describeAbortReason } from '../../src/errors';
import { endRefusedSpan } from '../../src/open';
import { ATTR_DEADLINE_ABORT_CODE, ATTR_DEADLINE_ABORT_REASON, ATTR_DEADLINE_OUTCOME } from '../../src/attributes';
import { errorFromClaim } from '../call/reject-claim';
import type { ResolvedConfig } from '../config';
import { ATTR_DEADLINE_WOULD_ABORT } from '../names';
import {
  GRPC_CANCELLED,
  GRPC_DEADLINE_EXCEEDED,
  type CallListener,
  type ChannelCall,
  type GrpcChannel,
  type GrpcMetadata,
  type GrpcStatus,
  type MetadataConstructor,
} from './grpc-types';
import { injectCallMetadata } from './metadata';
import { refusalClaimOf } from './refusal';
import { ATTR_RPC_GRPC_STATUS_CODE, endRpcSpan } from './spans';
import { markStatusWith } from './status-error';
import { grpcTargetUrl } from './target-url';

/**
 * grpc-js ends a call at the deadline we clamped it to with a timer of its
 * own, set through Date.now() and millisecond timers, which can fire a
 * millisecond or two before our monotonic cutoff. A DEADLINE_EXCEEDED that
 * arrives with more than this left is not our cutoff (a server's own limit).
 */
const OWN_TIMER_SLACK_MS = 5;

const NONE: unique symbol = Symbol('not aborted by us');

export interface GrpcCallInit {
  deadline: Deadline;
  /** `/package.Service/Method`. */
  method: string;
  observe: boolean;
  /** Why the call must not start (enforce mode only). */
  refusal: Error | undefined;
  /** True when the call's `deadline` was set to our cutoff (its own was later or absent). */
  clampedByUs: boolean;
  /** Where the outcome is recorded: instrumentation-grpc's client span, or ours. */
  span: Span;
  /** True when `span` is ours to end. */
  ownSpan: boolean;
  /** The channel the call was made on: its target is what getPeer() says while no stream is open. */
  channel: GrpcChannel;
  settings: ResolvedConfig;
  /** The caller's context, where the metadata is written from. */
  ctx: Context;
  /** The call's own deadline when it is earlier than the cutoff, else Infinity. */
  ownEpoch: number;
  Metadata: MetadataConstructor;
}

/**
 * One gRPC client call under a deadline. It takes over the `start` of the
 * call `Channel#createCall` made (on that call only), writes our metadata, and
 * stands between the call and the listener grpc-js's client layer gave it,
 * to see the status. It watches the deadline from the start to the status, so
 * it lives exactly as long as the call: past the scope that started it, and
 * no longer. At the cutoff it cancels the call with DEADLINE_EXCEEDED; on a
 * cancellation upstream, with CANCELLED. The status of a call it ended (or
 * that grpc-js ended at the cutoff it was clamped to) carries our error as
 * `cause` and our brand, so the caller's error satisfies `isDeadlineError`.
 */
export class GrpcCallGuard {
  private listener: CallListener | undefined;
  private stopWatching: (() => void) | undefined;
  private ended = false;
  private reason: unknown = NONE;
  private sentAtAbort = false;

  constructor(
    private readonly call: ChannelCall,
    private readonly init: GrpcCallInit,
  ) {}

  /** Takes the place of the call's own start, which is `start`. */
  start(metadata: GrpcMetadata, listener: CallListener, start: ChannelCall['start']): void {
    this.listener = listener;
    const { deadline, observe, refusal } = this.init;
    if (refusal !== undefined) return this.refuse(refusal);
    if (!observe && deadline.aborted) return this.endBeforeStart(deadline.abortReason);
    injectCallMetadata(metadata, this.init);
    start.call(this.call, metadata, {
      onReceiveMetadata: (received) => listener.onReceiveMetadata(received),
      onReceiveMessage: (message) => listener.onReceiveMessage(message),
      onReceiveStatus: (status) => this.onReceiveStatus(status),
    });
    // After start: a cancel needs a started call. Runs at once if already aborted.
    if (!this.ended) this.stopWatching = onDeadlineAbort(deadline, (reason) => this.onDeadlineAbort(reason));
    if (this.ended) this.detach();
  }

  /** The operation named by the errors this guard makes. */
  private get operation(): string {
    return `grpc ${this.init.method}`;
  }

  /** True once the call may have reached the server: grpc-js reports a peer only once a stream exists. */
  private mayHaveSent(): boolean {
    const peer = this.call.getPeer();
    return peer !== this.init.channel.getTarget() && peer !== 'unknown';
  }

  /** The call grpc-js made never starts: it is cancelled, and `status` goes to the listener on the next tick, as grpc-js reports a status that arises before any I/O. */
  private endWith(status: GrpcStatus): void {
    this.call.cancelWithStatus(status.code, status.details);
    process.nextTick(() => this.onReceiveStatus(status));
  }

  /** A call refused before it starts: DEADLINE_EXCEEDED that carries `error`, and no stream. */
  private refuse(error: Error): void {
    const { span, ownSpan } = this.init;
    this.ended = true;
    const status = { code: GRPC_DEADLINE_EXCEEDED, details: `refused before start: ${error.message}`, metadata: new this.init.Metadata() };
    markStatusWith(status, error);
    span.setAttribute(ATTR_DEADLINE_ABORT_CODE, abortCodeOf(error));
    if (ownSpan) {
      span.setAttribute(ATTR_RPC_GRPC_STATUS_CODE, status.code);
      endRefusedSpan(span, error);
    } else {
      // instrumentation-grpc ends its own span when the status reaches the caller.
      span.setAttribute(ATTR_DEADLINE_OUTCOME, 'not_started');
    }
    this.endWith(status);
  }

  /**
   * A call started after its deadline aborted (an interceptor held its start
   * back): nothing is sent. grpc-js may already have ended the call at the
   * deadline it was clamped to, with no listener yet to tell, so the status
   * is reported from here.
   */
  private endBeforeStart(reason: unknown): void {
    this.reason = this.reasonFor(reason);
    const code = abortCodeOf(reason) === 'CANCELLED' ? GRPC_CANCELLED : GRPC_DEADLINE_EXCEEDED;
    this.endWith({ code, details: describeAbortReason(this.reason), metadata: new this.init.Metadata() });
  }

  /** The error this call ends with: a caller's own cancellation reason is kept as the cause of ours, as on HTTP. */
  private reasonFor(reason: unknown): unknown {
    return abortCodeOf(reason) === 'CANCELLED' && !(reason instanceof DeadlineCancelledError) ? new DeadlineCancelledError(this.operation, reason) : reason;
  }

  private onDeadlineAbort(reason: unknown): void {
    if (this.ended) return;
    if (this.init.observe) {
      this.init.span.setAttribute(ATTR_DEADLINE_WOULD_ABORT, true);
      return this.detach();
    }
    this.reason = this.reasonFor(reason);
    this.sentAtAbort = this.mayHaveSent();
    const code = abortCodeOf(reason) === 'CANCELLED' ? GRPC_CANCELLED : GRPC_DEADLINE_EXCEEDED;
    this.call.cancelWithStatus(code, describeAbortReason(this.reason));
  }

  private onReceiveStatus(status: GrpcStatus): void {
    if (!this.ended) {
      this.ended = true;
      this.detach();
      this.record(status);
    }
    this.listener?.onReceiveStatus(status);
  }

  private record(status: GrpcStatus): void {
    const { deadline, observe, span } = this.init;
    let reason = this.reason;
    let sent = this.sentAtAbort;
    const claim = reason === NONE ? refusalClaimOf(status) : undefined;
    const believed = claim !== undefined && this.trustsRefusal();
    if (believed) {
      // The server refused before running anything: the call never started there.
      markStatusWith(status, errorFromClaim(this.operation, deadline, claim));
      span.setAttributes({ [ATTR_DEADLINE_OUTCOME]: 'not_started', [ATTR_DEADLINE_ABORT_CODE]: claim.code });
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
      span.setAttributes({ [ATTR_DEADLINE_OUTCOME]: outcome, [ATTR_DEADLINE_ABORT_CODE]: code, [ATTR_DEADLINE_ABORT_REASON]: describeAbortReason(reason) });
    } else if (observe && deadline.remainingMs() <= 0) {
      span.setAttribute(ATTR_DEADLINE_WOULD_ABORT, true);
    } else if (!believed && !observe && status.code === GRPC_DEADLINE_EXCEEDED && this.mayHaveSent()) {
      // A deadline ran out past this hop (the server's own, or a callee's passed on by its handler,
      // whose marker the server restates): the server may have done work, so nothing is known.
      span.setAttribute(ATTR_DEADLINE_OUTCOME, 'unknown');
    }
    if (this.init.ownSpan) endRpcSpan(span, status.code, SpanKind.CLIENT);
  }

  /** Whether to believe this peer's refusal (`trustReply`); asked only for a status that claims one. */
  private trustsRefusal(): boolean {
    const { settings, channel, method } = this.init;
    return settings.trustsReply({ transport: 'grpc', method, url: grpcTargetUrl(channel.getTarget()), statusCode: GRPC_DEADLINE_EXCEEDED });
  }

  private detach(): void {
    this.stopWatching?.();
    this.stopWatching = undefined;
  }
}
