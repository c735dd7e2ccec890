import { SpanKind, type Context, type Span } from '@opentelemetry/api';
import type { Deadline } from '../../src/deadline';
import { abortCodeOf, DeadlineCancelledError, DeadlineExceededError, describeAbortReason } from '../../src/errors';
import { endRefusedSpan } from '../../src/open';
import { ATTR_DEADLINE_OUTCOME } from '../../src/attributes';
import { budgetLeft, mayStart, refusalAt } from '../call/budget';
import { CallGuard } from '../call/guard';
import { errorFromClaim } from '../call/reject-claim';
import type { ResolvedConfig } from '../config';
import { injectDeadline, injectWithoutDeadline } from './client-metadata';
import { deadlineEpochMs, GRPC_CANCELLED, GRPC_DEADLINE_EXCEEDED, type CallListener, type ChannelCall, type GrpcChannel, type GrpcDeadline, type GrpcMetadata, type GrpcStatus, type MetadataConstructor } from './grpc-types';
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

/**
 * One gRPC client call under a deadline, watched from its start to its status: it lives exactly as long as the
 * call, past the scope that started it. It gives the call its deadline (callDeadline), writes its metadata and
 * takes the place of its listener (attach). The status of a call it ended (or that grpc-js ended at the cutoff it
 * was clamped to) carries our error as `cause` and our brand, so the caller's error satisfies `isDeadlineError`.
 */
export class GrpcCallGuard extends CallGuard implements CallListener {
  private call: ChannelCall | undefined;
  private listener: CallListener | undefined;
  private ended = false;
  private reason: unknown = NONE;
  private sentAtAbort = false;
  private refused = false;
  /** Why the call must not start (enforce mode only). */
  private refusal: Error | undefined;
  /** True when the call's `deadline` was set to our cutoff (its own was later or absent). */
  private clampedByUs = false;
  /** The call's own deadline when it is earlier than the cutoff, else Infinity. */
  private ownEpoch = Infinity;

  /** `span` is the call's, ours to end when `ownSpan`; `ctx` is the caller's context, where the metadata is written from. */
  constructor(
    deadline: Deadline,
    private readonly settings: ResolvedConfig,
    private readonly channel: GrpcChannel,
    private readonly method: string,
    private readonly ctx: Context,
    span: Span,
    private readonly ownSpan: boolean,
    private readonly Metadata: MetadataConstructor,
  ) {
    super(deadline, settings.mode === 'observe');
    this.addSpan(span);
  }

  /**
   * The `deadline` to create the call with, given its own: the earlier of the two, our cutoff in whole ms rounded
   * down (grpc-js hands `deadline - Date.now()` to setTimeout as it is). Observe mode keeps the call's own.
   * Decides here whether the call may start, from the same clock read.
   */
  callDeadline(own: GrpcDeadline): GrpcDeadline {
    const { deadline, observe } = this;
    // The wall clock before the monotonic one: a pause between the two reads can then only make
    // the deadline handed to grpc-js earlier than our cutoff, never later.
    const nowEpoch = Date.now();
    const left = budgetLeft(deadline);
    const minUsefulMs = this.settings.minUsefulMs;
    if (!mayStart(left, minUsefulMs)) {
      if (observe) this.markWouldReject();
      else this.refusal = refusalAt(deadline, left, `grpc ${this.method}`, minUsefulMs);
    }
    const ownEpoch = deadlineEpochMs(own);
    const cutoffEpoch = Math.floor(nowEpoch + (left >= 0 ? left : deadline.remainingMs()));
    this.clampedByUs = !observe && cutoffEpoch < ownEpoch;
    if (this.clampedByUs) return cutoffEpoch;
    this.ownEpoch = ownEpoch;
    return own;
  }

  /** Takes the place of the call's own `start`. */
  attach(call: ChannelCall): void {
    this.call = call;
    const start = call.start;
    call.start = (metadata, listener) => this.start(metadata, listener, start);
  }

  private start(metadata: GrpcMetadata, listener: CallListener, start: ChannelCall['start']): void {
    this.listener = listener;
    const { deadline, observe, refusal } = this;
    if (refusal !== undefined) return this.endBeforeStart(refusal, true);
    // One clock read for whether the deadline aborted while the start was held back, and for the remaining to send.
    const left = budgetLeft(deadline);
    if (!observe && left < 0) return this.endBeforeStart(this.reasonFor(deadline.abortReason), false);
    // Our deadline metadata only where `propagateTo` lets it go.
    const allowed = this.settings.propagatesTo;
    const ownSpan = this.ownSpan ? this.span : undefined;
    if (allowed === undefined || allowed(grpcTargetUrl(this.channel.getTarget()))) injectDeadline(metadata, this.ctx, deadline, left >= 0 ? left : deadline.remainingMs(), ownSpan, this.ownEpoch);
    else injectWithoutDeadline(metadata, this.ctx, ownSpan);
    // The guard listens in the caller's listener's place, and passes everything on.
    start.call(this.call, metadata, this);
    // After start: a cancel needs a started call. Runs at once if already aborted.
    if (!this.ended) this.arm();
    if (this.ended) this.disarm();
  }

  /** True once the call may have reached the server: grpc-js reports a peer only once a stream exists. */
  private mayHaveSent(): boolean {
    const peer = this.call!.getPeer();
    return peer !== this.channel.getTarget() && peer !== 'unknown';
  }

  /**
   * Ends a call that never starts: refused, or started after its deadline
   * aborted (an interceptor held its start back). grpc-js may already have
   * ended the call at the deadline it was clamped to, with no listener yet to
   * tell: it is cancelled, and the status goes to the listener from here, on
   * the next tick, as grpc-js reports a status that arises before any I/O.
   */
  private endBeforeStart(reason: unknown, refused: boolean): void {
    this.reason = reason;
    this.refused = refused;
    const code = !refused && abortCodeOf(reason) === 'CANCELLED' ? GRPC_CANCELLED : GRPC_DEADLINE_EXCEEDED;
    const details = refused ? `refused before start: ${describeAbortReason(reason)}` : describeAbortReason(reason);
    this.call!.cancelWithStatus(code, details);
    process.nextTick(() => this.onReceiveStatus({ code, details, metadata: new this.Metadata() }));
  }

  /** The error this call ends with: a caller's own cancellation reason is kept as the cause of ours, as on HTTP. */
  private reasonFor(reason: unknown): unknown {
    return abortCodeOf(reason) === 'CANCELLED' && !(reason instanceof DeadlineCancelledError) ? new DeadlineCancelledError(`grpc ${this.method}`, reason) : reason;
  }

  /** At the cutoff or an upstream cancel (enforce mode; the guard records it in observe mode). */
  protected cut(reason: unknown): void {
    if (this.ended) return;
    this.reason = this.reasonFor(reason);
    this.sentAtAbort = this.mayHaveSent();
    const code = abortCodeOf(reason) === 'CANCELLED' ? GRPC_CANCELLED : GRPC_DEADLINE_EXCEEDED;
    this.call!.cancelWithStatus(code, describeAbortReason(this.reason));
  }

  onReceiveMetadata(metadata: GrpcMetadata): void {
    this.listener!.onReceiveMetadata(metadata);
  }

  onReceiveMessage(message: unknown): void {
    this.listener!.onReceiveMessage(message);
  }

  onReceiveStatus(status: GrpcStatus): void {
    if (!this.ended) {
      this.ended = true;
      this.disarm();
      this.recordStatus(status);
    }
    this.listener?.onReceiveStatus(status);
  }

  private recordStatus(status: GrpcStatus): void {
    const { deadline, observe, settings, channel, method } = this;
    const span = this.span!;
    let reason = this.reason;
    let sent = this.sentAtAbort;
    const claim = reason === NONE ? refusalClaimOf(status) : undefined;
    // Whether to believe this peer's refusal (`trustReply`) is asked only for a status that claims one.
    const believed = claim !== undefined && settings.trustsReply({ transport: 'grpc', method, url: grpcTargetUrl(channel.getTarget()), statusCode: GRPC_DEADLINE_EXCEEDED });
    if (believed) {
      // The server refused before running anything: the call never started there.
      markStatusWith(status, errorFromClaim(`grpc ${method}`, deadline, claim));
      this.recordNotStarted(claim.code);
    } else if (reason === NONE && !observe && this.clampedByUs && status.code === GRPC_DEADLINE_EXCEEDED && deadline.remainingMs() <= OWN_TIMER_SLACK_MS) {
      const abortReason = deadline.aborted ? deadline.abortReason : undefined;
      reason = abortCodeOf(abortReason) === 'DEADLINE_EXCEEDED' ? abortReason : new DeadlineExceededError(`grpc ${method}`, deadline.expiresAtMs);
      sent = this.mayHaveSent();
    }
    if (reason !== NONE && (status.code === GRPC_DEADLINE_EXCEEDED || status.code === GRPC_CANCELLED)) {
      markStatusWith(status, reason);
      // As for an HTTP POST: once the request may have reached the server, its effect is unknown.
      this.recordAbort(reason, sent);
      if (this.refused) this.recordNotStarted();
    } else if (observe) {
      this.end();
    } else if (!believed && !observe && status.code === GRPC_DEADLINE_EXCEEDED && this.mayHaveSent()) {
      // A deadline ran out past this hop (the server's own, or a callee's passed on by its handler,
      // whose marker the server restates): the server may have done work, so nothing is known.
      this.record({ [ATTR_DEADLINE_OUTCOME]: 'unknown' });
    }
    if (!this.ownSpan) return;
    if (!this.refused) return endRpcSpan(span, status.code, SpanKind.CLIENT);
    span.setAttribute(ATTR_RPC_GRPC_STATUS_CODE, status.code);
    endRefusedSpan(span, reason);
  }
}
