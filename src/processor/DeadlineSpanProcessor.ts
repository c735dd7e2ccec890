import { SpanKind, SpanStatusCode, trace, type Attributes, type Context, type MeterProvider } from '@opentelemetry/api';
import { deadlineIn } from '../context';
import type { Deadline } from '../deadline';
import { DeadlineNode } from '../deadline-node';
import { abortCodeOf, describeAbortReason } from '../errors';
import { checkDuration, monotonicNow } from '../time';
import { ATTR_DEADLINE_ABORT_CODE, ATTR_DEADLINE_ABORT_REASON, ATTR_DEADLINE_AT_MS, ATTR_DEADLINE_BUDGET_MS, ATTR_DEADLINE_EXCEEDED, ATTR_DEADLINE_LATE, ATTR_DEADLINE_OPERATION, ATTR_DEADLINE_OUTCOME, ATTR_DEADLINE_QUEUE_DWELL_MS, ATTR_DEADLINE_REMAINING_AT_END_MS, ATTR_DEADLINE_REMAINING_MS, ATTR_DEADLINE_SOURCE, ATTR_DEADLINE_STOP_LAG_MS, ATTR_DEADLINE_VIOLATION, ATTR_DEADLINE_WIRE_SKEW_MS, ATTR_SPAN_KIND, ATTR_SPAN_NAME, type DeadlineOutcome, type DeadlineViolation } from '../attributes';
import { lazyInstruments, type DeadlineInstruments } from './metrics';
import { showStartedSpan } from './started-spans';
import { addSpanStates, removeSpanStates } from './statement-in-flight';
import type { ProcessedSpan, SdkSpanProcessor } from './sdk-types';
import { currentTurn } from './event-loop-turn';
import { judgeStop } from './stop-rule';

export interface DeadlineSpanProcessorConfig {
  /** Where the metrics go. Default: the global MeterProvider at first use (a no-op if none). */
  meterProvider?: MeterProvider;
  /** How long a span may go on after it should have stopped before it is flagged late. Default 250 (register entry: OTEL_DEADLINE_LATE_GRACE_MS). */
  lateGraceMs?: number;
  /** Adds a `span.name` label to the `deadline.stop_lag` histogram. Off by default: names can be many. */
  stopLagBySpanName?: boolean;
}

/** The default stop allowance in ms; the same as deadline-lineage's, so one number reads both. */
export const DEFAULT_LATE_GRACE_MS = 250;

/** Where a span's deadline ends, which is all its children compare against. */
interface Cutoff {
  /** On the monotonic clock: exact for this package's own deadlines (`ownCutoff`), approximate for a foreign one. */
  stopCutoffMono: number;
  ownCutoff: boolean;
  expiresAtMs: number;
}

interface SpanState extends Cutoff {
  startMono: number;
  endedAtMono: number | undefined;
  endedInTurn: number;
  /** A parent waiting on a child's stop is not late for it. */
  lastChildEndMono: number | undefined;
  /** Dropped at the end (and so, undefined once finished): an ended span can wait seconds in an exporter's queue, holding the node. */
  deadline: Deadline | undefined;
  /** The in-process parent's state (a consumer's producer excluded), until this span ends. */
  parentState: SpanState | undefined;
  startViolations: readonly DeadlineViolation[];
  startRemainingMs: number;
  /** Otherwise written with the end attributes (see onEnding). */
  startWritten: boolean;
  /** Set by a database command guard (statement-in-flight.ts). */
  statementInFlight: boolean;
}

/** The histogram records the budget at hop entries only (server, consumer): where it arrives from upstream. */
const HOP_ENTRY_ATTRIBUTES: Partial<Record<SpanKind, Attributes>> = {
  [SpanKind.SERVER]: { [ATTR_SPAN_KIND]: 'server' },
  [SpanKind.CONSUMER]: { [ATTR_SPAN_KIND]: 'consumer' },
};

const NO_VIOLATIONS: readonly DeadlineViolation[] = Object.freeze([]);
const NOTHING_LATE = Object.freeze({ violations: NO_VIOLATIONS, stopLagMs: undefined });

const KIND_NAMES: Record<SpanKind, string> = {
  [SpanKind.INTERNAL]: 'internal',
  [SpanKind.SERVER]: 'server',
  [SpanKind.CLIENT]: 'client',
  [SpanKind.PRODUCER]: 'producer',
  [SpanKind.CONSUMER]: 'consumer',
};

/** Outcomes a guard writes when it cut the span's work at an abort. */
const CUT_OUTCOMES: ReadonlySet<unknown> = new Set(['expired', 'cancelled', 'unknown']);

/** Compares on the monotonic clock when both are ours, so equal cutoffs compare exactly. */
function isLaterThan(deadline: Deadline, parent: Cutoff): boolean {
  if (deadline instanceof DeadlineNode && parent.ownCutoff) return deadline.cutoffMono > parent.stopCutoffMono;
  return deadline.expiresAtMs > parent.expiresAtMs;
}

/** The abort reason with `left` ms to the cutoff, without aborting (a listener could end the span twice). */
function abortReasonAt(deadline: Deadline, left: number): unknown {
  if (deadline instanceof DeadlineNode) return deadline.peekAbortReasonAt(left);
  return deadline.aborted ? deadline.abortReason : undefined;
}

/** Whether the span's status says it failed (an SDK span; any other reads as not failed). */
function endedWithError(span: object): boolean {
  return (span as { status?: { code?: unknown } }).status?.code === SpanStatusCode.ERROR;
}

/** The outcome at that look. */
function outcomeAt(deadline: Deadline, abortReason: unknown, left: number): DeadlineOutcome {
  if (abortReason !== undefined) return abortCodeOf(abortReason) === 'CANCELLED' ? 'cancelled' : 'expired';
  if (deadline instanceof DeadlineNode) return left > 0 ? 'completed' : 'expired';
  return deadline.expired ? 'expired' : 'completed';
}

/**
 * Records, on every span started under a deadline, how much budget reached it
 * and how it ended, and flags lateness (`deadline.late=true`). Ids and timings
 * only. Attributes are set in `onEnding` (sdk-trace-base 2.x); on an SDK without
 * it only the start attributes reach the span, and metrics come from `onEnd`.
 */
export class DeadlineSpanProcessor implements SdkSpanProcessor {
  /** For as long as the span lives: a child that starts after its parent ended still compares with it. */
  private readonly states = new WeakMap<object, SpanState>();
  private readonly instruments: () => DeadlineInstruments;
  private readonly lateGraceMs: number;
  private readonly stopLagBySpanName: boolean;
  /** Set by the first onEnding call: this SDK ends spans through it. */
  private sdkCallsOnEnding = false;

  constructor(config: DeadlineSpanProcessorConfig = {}) {
    this.instruments = lazyInstruments(config.meterProvider);
    this.lateGraceMs = config.lateGraceMs === undefined ? DEFAULT_LATE_GRACE_MS : checkDuration('lateGraceMs', config.lateGraceMs);
    if (config.stopLagBySpanName !== undefined && typeof config.stopLagBySpanName !== 'boolean') {
      throw new TypeError('stopLagBySpanName must be a boolean');
    }
    this.stopLagBySpanName = config.stopLagBySpanName === true;
    addSpanStates(this.states);
  }

  onStart(span: ProcessedSpan, parentContext: Context): void {
    const deadline = deadlineIn(parentContext);
    if (deadline === undefined) return;
    showStartedSpan(span);
    const startMono = monotonicNow();
    const signed = deadline instanceof DeadlineNode ? deadline.cutoffMono - startMono : deadline.remainingMs();
    const remaining = signed > 0 ? signed : 0;
    const abortReason = abortReasonAt(deadline, signed);
    const startWritten = !this.sdkCallsOnEnding;
    if (startWritten) writeStartAttributes(span, deadline, remaining);

    const parentSpan = trace.getSpan(parentContext) as unknown as object | undefined;
    const parentState = parentSpan === undefined ? undefined : this.states.get(parentSpan);
    // The same deadline as the parent's has the same cutoff: never later.
    const later = parentState !== undefined && parentState.deadline !== deadline && isLaterThan(deadline, parentState);
    let startViolations = NO_VIOLATIONS;
    if (later || remaining <= 0 || abortReason !== undefined) {
      const found: DeadlineViolation[] = later ? ['later_than_parent'] : [];
      if (remaining <= 0) found.push('started_after_expiry');
      else if (abortReason !== undefined) found.push('started_after_cancel');
      startViolations = found;
    }

    // Only in-process SDK spans can be compared; a remote parent has no `ended`. A
    // consumer runs after its producer span ended by design: that is not lateness.
    const localParent = span.kind !== SpanKind.CONSUMER ? parentState : undefined;
    const ownCutoff = deadline instanceof DeadlineNode;
    this.states.set(span, {
      deadline,
      ownCutoff,
      expiresAtMs: deadline.expiresAtMs,
      stopCutoffMono: ownCutoff ? deadline.cutoffMono : startMono + signed,
      startMono,
      endedAtMono: undefined,
      endedInTurn: -1,
      lastChildEndMono: undefined,
      parentState: localParent,
      startViolations,
      startRemainingMs: remaining,
      startWritten,
      statementInFlight: false,
    });
    const hopEntry = HOP_ENTRY_ATTRIBUTES[span.kind];
    if (hopEntry !== undefined) this.instruments().remaining.record(remaining, hopEntry, parentContext);
  }

  onEnding(span: ProcessedSpan): void {
    this.sdkCallsOnEnding = true;
    const state = this.states.get(span);
    if (state === undefined || state.deadline === undefined) return;
    const { deadline } = state;
    state.deadline = undefined;
    const preset = span.attributes[ATTR_DEADLINE_OUTCOME] as DeadlineOutcome | undefined;
    // Signed: negative once the cutoff has passed. The outcome and the abort code below go by the same look.
    const endMono = monotonicNow();
    const left = deadline instanceof DeadlineNode ? deadline.cutoffMono - endMono : deadline.expiresAtMs - Date.now();
    state.endedAtMono = endMono;
    state.endedInTurn = currentTurn();
    const abortReason = abortReasonAt(deadline, left);
    // A command guard still in flight when its span ends without an error: the span ends on the reply.
    const outcome = preset ?? (state.statementInFlight && !endedWithError(span) ? 'completed' : outcomeAt(deadline, abortReason, left));
    const remainingAtEnd = deadline instanceof DeadlineNode ? Math.max(0, left) : deadline.remainingMs();
    let abortCode = span.attributes[ATTR_DEADLINE_ABORT_CODE];
    const abortCodeToWrite = abortReason !== undefined && abortCode === undefined ? abortCodeOf(abortReason) : undefined;
    abortCode ??= abortCodeToWrite;
    if (typeof abortCode === 'string') this.instruments().aborts.add(1, { [ATTR_DEADLINE_ABORT_CODE]: abortCode });

    // When the abort reached the span: recorded by our own deadlines only; another implementation's counts from its cutoff.
    const abortMono = abortReason !== undefined && deadline instanceof DeadlineNode ? deadline.peekAbortRecordedAtMono() : undefined;
    // Judged before anything is written: whether a guard cut the span is read from what the guard wrote.
    const { violations, stopLagMs } = this.judgeEnd(span, state, outcome, abortMono, endMono);
    const parentState = state.parentState;
    // Kept only for the comparison just made: do not hold the parent's state alive.
    state.parentState = undefined;
    if (parentState !== undefined) parentState.lastChildEndMono = endMono;
    // One setAttribute each, in this order: the SDK's setAttributes does the same after walking an object.
    if (!state.startWritten) writeStartAttributes(span, deadline, state.startRemainingMs);
    span.setAttribute(ATTR_DEADLINE_REMAINING_AT_END_MS, Math.floor(remainingAtEnd));
    span.setAttribute(ATTR_DEADLINE_EXCEEDED, remainingAtEnd <= 0);
    if (preset === undefined) span.setAttribute(ATTR_DEADLINE_OUTCOME, outcome);
    if (abortCodeToWrite !== undefined) {
      span.setAttribute(ATTR_DEADLINE_ABORT_CODE, abortCodeToWrite);
      span.setAttribute(ATTR_DEADLINE_ABORT_REASON, describeAbortReason(abortReason));
    }
    if (stopLagMs !== undefined) {
      span.setAttribute(ATTR_DEADLINE_STOP_LAG_MS, stopLagMs);
      this.instruments().stopLag.record(stopLagMs, this.stopLagLabels(span, abortCode));
    }
    if (violations.length > 0) {
      span.setAttribute(ATTR_DEADLINE_LATE, true);
      span.setAttribute(ATTR_DEADLINE_VIOLATION, violations.join(','));
      const counter = this.instruments().violations;
      for (const violation of violations) counter.add(1, { [ATTR_DEADLINE_VIOLATION]: violation });
    }
  }

  onEnd(span: object): void {
    // Only reached unfinished when the SDK has no onEnding: count what we can.
    const state = this.states.get(span);
    if (state === undefined || state.deadline === undefined) return;
    state.deadline = undefined;
    const counter = this.instruments().violations;
    for (const violation of state.startViolations) counter.add(1, { [ATTR_DEADLINE_VIOLATION]: violation });
  }

  forceFlush(): Promise<void> {
    return Promise.resolve();
  }

  shutdown(): Promise<void> {
    removeSpanStates(this.states);
    return Promise.resolve();
  }

  /** The stop-lag histogram's attributes: bounded (kind × code) unless span names were asked for. */
  private stopLagLabels(span: ProcessedSpan, abortCode: unknown): Attributes {
    const labels: Attributes = { [ATTR_SPAN_KIND]: KIND_NAMES[span.kind] ?? 'internal' };
    // Abort codes come from this package's errors, or what a guard wrote: a few.
    if (typeof abortCode === 'string') labels[ATTR_DEADLINE_ABORT_CODE] = abortCode;
    const name = (span as { name?: unknown }).name;
    if (this.stopLagBySpanName && typeof name === 'string') labels[ATTR_SPAN_NAME] = name;
    return labels;
  }

  /** The violations at the span's end, and its stop lag (see stop-rule.ts). */
  private judgeEnd(
    span: ProcessedSpan,
    state: SpanState,
    outcome: DeadlineOutcome,
    abortMono: number | undefined,
    endMono: number,
  ): { violations: readonly DeadlineViolation[]; stopLagMs: number | undefined } {
    // Work that was refused never ran, so it cannot have run late.
    const ran = outcome !== 'not_started';
    let endedAfterParent = false;
    let endedAfterDeadline = false;
    let stopLagMs: number | undefined;
    const parentEndMono = state.parentState?.endedAtMono;
    // A span that ended before its cutoff and after no parent has nothing to judge.
    if (ran && (endMono >= state.stopCutoffMono || parentEndMono !== undefined)) {
      const judged = judgeStop(
        {
          startMono: state.startMono,
          endMono,
          cutoffMono: state.stopCutoffMono,
          abortMono,
          lastChildEndMono: state.lastChildEndMono,
          parentEndMono,
          endedInParentsTurn: state.parentState?.endedInTurn === state.endedInTurn,
          cutByPackage: cutByPackage(span),
        },
        this.lateGraceMs,
      );
      stopLagMs = judged.stopLagMs === undefined ? undefined : Math.round(judged.stopLagMs);
      endedAfterParent = judged.endedAfterParent;
      endedAfterDeadline = judged.endedAfterDeadline;
    }
    const { startViolations } = state;
    // Most spans: nothing to flag, and nothing allocated to say so.
    if (startViolations.length === 0 && !endedAfterParent && !endedAfterDeadline && stopLagMs === undefined) return NOTHING_LATE;
    const violations = startViolations.filter((v) => ran || v === 'later_than_parent');
    if (endedAfterParent) violations.push('ended_after_parent');
    if (endedAfterDeadline) violations.push('ended_after_deadline');
    return { violations, stopLagMs };
  }
}

/** A guard of this package cut the span's work: it wrote the abort and a cut outcome on the span before it ended. */
function cutByPackage(span: ProcessedSpan): boolean {
  const attributes = span.attributes;
  return attributes[ATTR_DEADLINE_ABORT_CODE] !== undefined && CUT_OUTCOMES.has(attributes[ATTR_DEADLINE_OUTCOME]);
}

/** Writes the start attributes; the operation is read now, since a server renames the adopted node after its span started. */
function writeStartAttributes(span: ProcessedSpan, deadline: Deadline, remaining: number): void {
  span.setAttribute(ATTR_DEADLINE_AT_MS, Math.floor(deadline.expiresAtMs));
  span.setAttribute(ATTR_DEADLINE_REMAINING_MS, Math.floor(remaining));
  span.setAttribute(ATTR_DEADLINE_BUDGET_MS, Math.round(deadline.budgetMs));
  span.setAttribute(ATTR_DEADLINE_SOURCE, deadline.source);
  span.setAttribute(ATTR_DEADLINE_OPERATION, deadline.operation);
  if (deadline.wireSkewMs !== undefined) span.setAttribute(ATTR_DEADLINE_WIRE_SKEW_MS, deadline.wireSkewMs);
  if (deadline.queueDwellMs !== undefined) span.setAttribute(ATTR_DEADLINE_QUEUE_DWELL_MS, deadline.queueDwellMs);
}
