import type { Span } from '@opentelemetry/api';
import { unwatchDeadline, watchDeadline, type Deadline } from '../../src/deadline';
import type { AbortWatcher } from '../../src/deadline-node';
import { abortCodeOf, describeAbortReason } from '../../src/errors';
import { DeadlineAttributes } from '../../src/attributes';

const { OUTCOME, ABORT_CODE, ABORT_REASON, WOULD_ABORT, WOULD_REJECT } = DeadlineAttributes;

/**
 * The guard of a call in flight (HTTP call, database statement, gRPC call): it watches the deadline from `arm` to
 * `disarm`, so a call awaited after its scope ended still stops at the cutoff, and writes the outcome on every span
 * it is shown. How the call is stopped is the transport's part: `cut`.
 */
export abstract class CallGuard implements AbortWatcher {
  /** The first span shown, then any more: most calls show one. See AbortWatcher in src/deadline-node.ts for why no array literal. */
  protected span: Span | undefined;
  private moreSpans: Set<Span> | undefined;
  /** What has been recorded, for a span shown later; undefined until something is. */
  private attributes: Record<string, string | boolean> | undefined;
  private armed = false;
  private armedSignal: AbortSignal | undefined;

  constructor(readonly deadline: Deadline, readonly observe: boolean) {}

  addSpan(span: Span): void {
    if (this.span === undefined) this.span = span;
    else if (span === this.span || this.moreSpans?.has(span) === true) return;
    else (this.moreSpans ??= new Set()).add(span);
    if (this.attributes !== undefined) span.setAttributes(this.attributes);
  }

  /** Stops the call for `reason`: the deadline or the caller's signal aborted while it was armed (enforce mode). */
  protected abstract cut(reason: unknown): void;

  /** Calls `cut(reason)` once when the deadline or the caller's `signal` aborts (at once if it has), unless disarmed; observe mode only records it. */
  protected arm(signal?: AbortSignal): void {
    if (this.armed) return;
    this.armed = true;
    // The guard is its own watcher and signal listener: no closure per call.
    watchDeadline(this.deadline, this);
    if (!this.armed || signal === undefined) return;
    this.armedSignal = signal;
    signal.addEventListener('abort', this);
  }

  /** @internal The deadline aborted. */
  onAbort(reason: unknown): void {
    if (!this.armed) return;
    this.disarm();
    if (this.observe) this.record({ [WOULD_ABORT]: true });
    else this.cut(reason);
  }

  /** @internal The caller's signal aborted (an EventListener object). */
  handleEvent(event: Event): void {
    this.onAbort((event.target as AbortSignal).reason);
  }

  disarm(): void {
    if (!this.armed) return;
    this.armed = false;
    unwatchDeadline(this.deadline, this);
    this.armedSignal?.removeEventListener('abort', this);
    this.armedSignal = undefined;
  }

  /** Disarms a call that ended on its own; observe mode records whether its cutoff passed (its timer may not have run yet). */
  end(): void {
    this.disarm();
    if (this.observe && this.deadline.remainingMs() <= 0) this.record({ [WOULD_ABORT]: true });
  }

  /** The call was stopped for `reason`: `unknown` if it may have had an effect on the server, else `cancelled` or `expired`. */
  recordAbort(reason: unknown, effectUnknown: boolean): void {
    const code = abortCodeOf(reason);
    const outcome = effectUnknown ? 'unknown' : code === 'CANCELLED' ? 'cancelled' : 'expired';
    this.record({ [OUTCOME]: outcome, [ABORT_CODE]: code, [ABORT_REASON]: describeAbortReason(reason) });
  }

  /** Nothing ran: the call was refused before it was sent, or the server refused it on arrival. */
  recordNotStarted(code?: string): void {
    this.record(code === undefined ? { [OUTCOME]: 'not_started' } : { [OUTCOME]: 'not_started', [ABORT_CODE]: code });
  }

  /** Observe mode: enforce mode would have refused the call. */
  markWouldReject(): void {
    this.record({ [WOULD_REJECT]: true });
  }

  record(attributes: Record<string, string | boolean>): void {
    this.attributes = this.attributes === undefined ? attributes : { ...this.attributes, ...attributes };
    // An ended span keeps what it has (writing would only log the SDK's warning).
    if (this.span?.isRecording() === true) this.span.setAttributes(attributes);
    for (const span of this.moreSpans ?? []) if (span.isRecording()) span.setAttributes(attributes);
  }
}
