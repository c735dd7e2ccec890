import { SpanKind, trace, type Attributes, type Context, type MeterProvider } from '@opentelemetry/api';
import { getDeadline } from '../context';
import { DeadlineNode, type Deadline } from '../deadline';
import { abortCodeOf, describeAbortReason } from '../errors';
import { checkDuration, monotonicNow } from '../time';
import {
  ATTR_DEADLINE_ABORT_CODE,
  ATTR_DEADLINE_ABORT_REASON,
  ATTR_DEADLINE_AT_MS,
  ATTR_DEADLINE_BUDGET_MS,
  ATTR_DEADLINE_EXCEEDED,
  ATTR_DEADLINE_LATE,
  ATTR_DEADLINE_OPERATION,
  ATTR_DEADLINE_OUTCOME,
  ATTR_DEADLINE_QUEUE_DWELL_MS,
  ATTR_DEADLINE_REMAINING_AT_END_MS,
  ATTR_DEADLINE_REMAINING_MS,
  ATTR_DEADLINE_SOURCE,
  ATTR_DEADLINE_VIOLATION,
  ATTR_DEADLINE_WIRE_SKEW_MS,
  ATTR_SPAN_KIND,
  type DeadlineOutcome,
  type DeadlineViolation,
} from '../attributes';
import { lazyInstruments, type DeadlineInstruments } from './metrics';
import type { ProcessedSpan, SdkSpanProcessor } from './sdk-types';

export interface DeadlineSpanProcessorConfig {
  /** Where the metrics go. Default: the global MeterProvider at first use (a no-op if none). */
  meterProvider?: MeterProvider;
  /**
   * A span that ends within this many ms after its cutoff is not flagged
   * `ended_after_deadline`: that is the time an enforced abort takes to unwind.
   * Default 10.
   */
  lateGraceMs?: number;
}

interface SpanState {
  deadline: Deadline;
  parentSpan: { ended?: boolean } | undefined;
  startViolations: readonly DeadlineViolation[];
  /** Set once the end has been recorded. */
  finished: boolean;
}

/** Histogram attributes per span kind, built once: this runs for every span. */
const KIND_ATTRIBUTES: Record<number, Attributes> = Object.fromEntries(
  (
    [
      [SpanKind.INTERNAL, 'internal'],
      [SpanKind.SERVER, 'server'],
      [SpanKind.CLIENT, 'client'],
      [SpanKind.PRODUCER, 'producer'],
      [SpanKind.CONSUMER, 'consumer'],
    ] as const
  ).map(([kind, name]) => [kind, Object.freeze({ [ATTR_SPAN_KIND]: name })]),
);

const NO_VIOLATIONS: readonly DeadlineViolation[] = Object.freeze([]);

/** Compares on the monotonic clock when both are ours, so equal cutoffs compare exactly. */
function isLaterThan(deadline: Deadline, other: Deadline): boolean {
  if (deadline instanceof DeadlineNode && other instanceof DeadlineNode) return deadline.cutoffMono > other.cutoffMono;
  return deadline.expiresAtMs > other.expiresAtMs;
}

function outcomeOf(deadline: Deadline): DeadlineOutcome {
  if (deadline.aborted) return abortCodeOf(deadline.abortReason) === 'CANCELLED' ? 'cancelled' : 'expired';
  return deadline.expired ? 'expired' : 'completed';
}

/**
 * Records, on every span started under a deadline, how much budget reached it
 * and how it ended, and flags lateness so it can be found in a trace backend
 * with `deadline.late=true`. Ids and timings only: never bodies or arguments.
 *
 * End attributes are written in `onEnding` (sdk-trace-base 2.x and later).
 * On an SDK without `onEnding` only the start attributes reach the span; the
 * metrics are still recorded from `onEnd`.
 */
export class DeadlineSpanProcessor implements SdkSpanProcessor {
  /**
   * Where each span started under a deadline keeps its state, for as long as
   * the span lives: a child that starts after its parent ended can still
   * compare with its deadline. A property of the span object under a key of
   * this processor's own rather than a WeakMap: one WeakMap entry per span
   * made garbage collection cost more than the rest of this processor.
   */
  private readonly stateKey: symbol = Symbol('otel-deadline.span-state');
  /** For the rare span object that cannot take a property (frozen by some other SDK). */
  private readonly sealedSpanStates = new WeakMap<object, SpanState>();
  private readonly instruments: () => DeadlineInstruments;
  private readonly lateGraceMs: number;

  constructor(config: DeadlineSpanProcessorConfig = {}) {
    this.instruments = lazyInstruments(config.meterProvider);
    this.lateGraceMs = config.lateGraceMs === undefined ? 10 : checkDuration('lateGraceMs', config.lateGraceMs);
  }

  onStart(span: ProcessedSpan, parentContext: Context): void {
    const deadline = getDeadline(parentContext);
    if (deadline === undefined) return;
    const remaining = deadline.remainingMs();
    // One setAttribute each: this runs for every span, and setAttributes
    // would iterate an object literal built just for the call.
    span.setAttribute(ATTR_DEADLINE_AT_MS, Math.floor(deadline.expiresAtMs));
    span.setAttribute(ATTR_DEADLINE_REMAINING_MS, Math.floor(remaining));
    span.setAttribute(ATTR_DEADLINE_BUDGET_MS, Math.round(deadline.budgetMs));
    span.setAttribute(ATTR_DEADLINE_SOURCE, deadline.source);
    span.setAttribute(ATTR_DEADLINE_OPERATION, deadline.operation);
    if (deadline.wireSkewMs !== undefined) span.setAttribute(ATTR_DEADLINE_WIRE_SKEW_MS, deadline.wireSkewMs);
    if (deadline.queueDwellMs !== undefined) span.setAttribute(ATTR_DEADLINE_QUEUE_DWELL_MS, deadline.queueDwellMs);

    const parentSpan = trace.getSpan(parentContext) as unknown as { ended?: boolean } | undefined;
    const parentDeadline = parentSpan === undefined ? undefined : this.stateOf(parentSpan)?.deadline;
    const later = parentDeadline !== undefined && parentDeadline !== deadline && isLaterThan(deadline, parentDeadline);
    let startViolations = NO_VIOLATIONS;
    if (later || remaining <= 0 || deadline.aborted) {
      const found: DeadlineViolation[] = later ? ['later_than_parent'] : [];
      if (remaining <= 0) found.push('started_after_expiry');
      else if (deadline.aborted) found.push('started_after_cancel');
      startViolations = found;
    }

    // Only in-process SDK spans can be compared; a remote parent has no `ended`. A
    // consumer runs after its producer span ended by design: that is not lateness.
    const localParent = parentDeadline !== undefined && span.kind !== SpanKind.CONSUMER ? parentSpan : undefined;
    this.keepState(span, { deadline, parentSpan: localParent, startViolations, finished: false });
    this.instruments().remaining.record(remaining, KIND_ATTRIBUTES[span.kind] ?? KIND_ATTRIBUTES[SpanKind.INTERNAL]);
  }

  onEnding(span: ProcessedSpan): void {
    const state = this.stateOf(span);
    if (state === undefined || state.finished) return;
    state.finished = true;
    const { deadline } = state;
    const attributes = span.attributes;
    const preset = attributes[ATTR_DEADLINE_OUTCOME] as DeadlineOutcome | undefined;
    const outcome = preset ?? outcomeOf(deadline);
    // Signed: negative once the cutoff has passed.
    const left = remainingSigned(deadline);
    const remainingAtEnd = deadline instanceof DeadlineNode ? Math.max(0, left) : deadline.remainingMs();
    span.setAttribute(ATTR_DEADLINE_REMAINING_AT_END_MS, Math.floor(remainingAtEnd));
    span.setAttribute(ATTR_DEADLINE_EXCEEDED, remainingAtEnd <= 0);
    if (preset === undefined) span.setAttribute(ATTR_DEADLINE_OUTCOME, outcome);

    if (deadline.aborted && attributes[ATTR_DEADLINE_ABORT_CODE] === undefined) {
      span.setAttribute(ATTR_DEADLINE_ABORT_CODE, abortCodeOf(deadline.abortReason));
      span.setAttribute(ATTR_DEADLINE_ABORT_REASON, describeAbortReason(deadline.abortReason));
    }
    const abortCode = span.attributes[ATTR_DEADLINE_ABORT_CODE];
    if (typeof abortCode === 'string') this.instruments().aborts.add(1, { [ATTR_DEADLINE_ABORT_CODE]: abortCode });

    const violations = this.violationsAtEnd(state, outcome, -left);
    // Kept only for the comparison just made: do not hold the parent span alive.
    state.parentSpan = undefined;
    if (violations.length > 0) {
      span.setAttribute(ATTR_DEADLINE_LATE, true);
      span.setAttribute(ATTR_DEADLINE_VIOLATION, violations.join(','));
      const counter = this.instruments().violations;
      for (const violation of violations) counter.add(1, { [ATTR_DEADLINE_VIOLATION]: violation });
    }
  }

  onEnd(span: object): void {
    // Only reached unfinished when the SDK has no onEnding: count what we can.
    const state = this.stateOf(span);
    if (state === undefined || state.finished) return;
    state.finished = true;
    const counter = this.instruments().violations;
    for (const violation of state.startViolations) counter.add(1, { [ATTR_DEADLINE_VIOLATION]: violation });
  }

  forceFlush(): Promise<void> {
    return Promise.resolve();
  }

  shutdown(): Promise<void> {
    return Promise.resolve();
  }

  private stateOf(span: object): SpanState | undefined {
    return (span as { [key: symbol]: SpanState | undefined })[this.stateKey] ?? this.sealedSpanStates.get(span);
  }

  private keepState(span: object, state: SpanState): void {
    if (Object.isExtensible(span)) (span as { [key: symbol]: SpanState })[this.stateKey] = state;
    else this.sealedSpanStates.set(span, state);
  }

  private violationsAtEnd(state: SpanState, outcome: DeadlineOutcome, overrunMs: number): readonly DeadlineViolation[] {
    // Work that was refused never ran, so it cannot have run late.
    const ran = outcome !== 'not_started';
    const endedAfterParent = ran && state.parentSpan?.ended === true;
    const endedAfterDeadline = ran && overrunMs > this.lateGraceMs;
    // The usual case: nothing to report, nothing to allocate.
    if (state.startViolations.length === 0 && !endedAfterParent && !endedAfterDeadline) return NO_VIOLATIONS;
    const violations = state.startViolations.filter((v) => ran || v === 'later_than_parent');
    if (endedAfterParent) violations.push('ended_after_parent');
    if (endedAfterDeadline) violations.push('ended_after_deadline');
    return violations;
  }
}

/** Milliseconds to the cutoff, negative once it has passed. */
function remainingSigned(deadline: Deadline): number {
  if (deadline instanceof DeadlineNode) return deadline.cutoffMono - monotonicNow();
  return deadline.expiresAtMs - Date.now();
}
