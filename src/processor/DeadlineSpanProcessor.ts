import { SpanKind, SpanStatusCode, trace, type Attributes, type Context, type MeterProvider } from '@opentelemetry/api';
import { deadlineIn } from '../context';
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
  ATTR_DEADLINE_STOP_LAG_MS,
  ATTR_DEADLINE_VIOLATION,
  ATTR_DEADLINE_WIRE_SKEW_MS,
  ATTR_SPAN_KIND,
  ATTR_SPAN_NAME,
  type DeadlineOutcome,
  type DeadlineViolation,
} from '../attributes';
import { lazyInstruments, type DeadlineInstruments } from './metrics';
import { showStartedSpan } from './started-spans';
import { addSpanStateKey, removeSpanStateKey } from './statement-in-flight';
import type { ProcessedSpan, SdkSpanProcessor } from './sdk-types';
import { countAdded, directAttributes, type AttributeMap } from './direct-attributes';
import { judgeStop } from './stop-rule';

export interface DeadlineSpanProcessorConfig {
  /** Where the metrics go. Default: the global MeterProvider at first use (a no-op if none). */
  meterProvider?: MeterProvider;
  /**
   * The stop allowance: how long a span may go on after the point it should
   * have stopped before it is flagged `ended_after_deadline` or
   * `ended_after_parent`. That point is the later of its cutoff (or its
   * parent's end), the moment the deadline's abort reached it, and the end of
   * its last child; spans the package cut itself are judged by their stop
   * path instead (see stop-rule.ts and docs/lineage.md). The register entry
   * reads it from OTEL_DEADLINE_LATE_GRACE_MS. Default 250.
   */
  lateGraceMs?: number;
  /**
   * Adds the span's name as a `span.name` label to the `deadline.stop_lag`
   * histogram. Off by default: span names can be many (a route, a statement).
   */
  stopLagBySpanName?: boolean;
}

/**
 * The default stop allowance in ms: a reply written and promises unwound after the last stop, on
 * a loaded host where a process can stall 100 ms or more. The same as deadline-lineage's
 * allowance across processes, so one number reads both.
 */
export const DEFAULT_LATE_GRACE_MS = 250;

/** Where a span's deadline ends, which is all its children compare against. */
interface Cutoff {
  /** On the monotonic clock, for this package's own deadlines. */
  cutoffMono: number | undefined;
  expiresAtMs: number;
}

interface SpanState extends Cutoff {
  /** The cutoff on the monotonic clock for any deadline (approximate for a foreign one), and the span's start. */
  stopCutoffMono: number;
  startMono: number;
  /** Set when the span ends, for its children's ended_after_parent. */
  endedAtMono: number | undefined;
  /** The end of its last child that has ended: a parent waiting on a child's stop is not late for it. */
  lastChildEndMono: number | undefined;
  /**
   * Until the span ends. Dropped then: an ended span can wait seconds in an
   * exporter's queue, and would keep its deadline node (and what that holds)
   * alive all that time; its children only need the cutoff.
   */
  deadline: Deadline | undefined;
  /** The in-process parent's state (a consumer's producer excluded), until this span ends. */
  parentState: SpanState | undefined;
  startViolations: readonly DeadlineViolation[];
  /** Set once the end has been recorded. */
  finished: boolean;
  /** Budget left when the span started. */
  startRemainingMs: number;
  /**
   * The ms left at the start look as a guard's budgetLeft counts them, or 0
   * when the deadline had expired or aborted by then: what a database command
   * guard reads instead of the clock (see statement-in-flight.ts).
   */
  startBudgetLeftMs: number;
  /** The start attributes are on the span already (see onStart); otherwise they are written with the end ones. */
  startWritten: boolean;
  /** Set by a database command guard whose command this span covers (see statement-in-flight.ts). */
  statementInFlight: boolean;
}

/** The start attributes; undefined fields are not written. */
interface StartValues {
  atMs: number;
  remainingMs: number;
  budgetMs: number;
  source: string;
  operation: string;
  wireSkewMs: number | undefined;
  queueDwellMs: number | undefined;
}

/** Everything written on a span when it ends; undefined fields are not written. */
interface EndRecord {
  /** The start attributes, unless they were set at start. */
  start?: StartValues;
  remainingAtEndMs: number;
  exceeded: boolean;
  outcome?: string;
  abortCode?: string;
  abortReason?: string;
  violation?: string;
  stopLagMs?: number;
}

/** The most attributes one EndRecord holds. */
const MAX_END_RECORD_KEYS = 15;

/**
 * Histogram attributes of the span kinds whose start is recorded, built once.
 * Only hop entries: a server span (a request arrived) and a consumer span (a
 * job or message was picked up). That is where a budget arrives from upstream,
 * which is what the histogram is for (the alerts in deploy/prometheus read it
 * there); the budget at a client or internal span start is on the span
 * itself, as `deadline.remaining_ms`. One record per hop instead of one per
 * span saves the SDK's record work on every outgoing call.
 */
const HOP_ENTRY_ATTRIBUTES: Partial<Record<SpanKind, Attributes>> = {
  [SpanKind.SERVER]: Object.freeze({ [ATTR_SPAN_KIND]: 'server' }),
  [SpanKind.CONSUMER]: Object.freeze({ [ATTR_SPAN_KIND]: 'consumer' }),
};

const NO_VIOLATIONS: readonly DeadlineViolation[] = Object.freeze([]);

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
  if (deadline instanceof DeadlineNode && parent.cutoffMono !== undefined) return deadline.cutoffMono > parent.cutoffMono;
  return deadline.expiresAtMs > parent.expiresAtMs;
}

/*
 * One look at the deadline per span start and per span end: for our own
 * deadlines one clock read, the abort state then found from that read
 * (DeadlineNode#peekAbortReasonAt). Where a clock read is a system call (seen
 * on a KVM guest: 60-320 ns each), the four reads an end used to take cost
 * more than the rest of the processor's work on the span. The look never
 * aborts anything: recording an expiry whose timer has not run yet would call
 * its listeners from inside the SDK's span.start() or span.end(), and a
 * listener that ends the same span (instrumentation-ioredis does, through our
 * command guard) would end and export it twice. Other Deadline
 * implementations are asked through the public interface.
 */

/** The abort reason at the look that found `left` ms to the cutoff; undefined if none. */
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
 * and how it ended, and flags lateness so it can be found in a trace backend
 * with `deadline.late=true`. Ids and timings only: never bodies or arguments.
 *
 * End attributes are written in `onEnding` (sdk-trace-base 2.x and later),
 * and so are the start attributes, with the values taken at start: one write
 * per span, which keeps the SDK's attribute map fast (see
 * direct-attributes.ts). On an SDK without `onEnding` the start attributes are
 * set at start and are all that reaches the span; the metrics are still
 * recorded from `onEnd`.
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
  /** Whether sealedSpanStates holds anything: spans without state (remote parents, spans under no deadline) then cost no WeakMap look-up. */
  private anySealed = false;
  private readonly instruments: () => DeadlineInstruments;
  private readonly lateGraceMs: number;
  private readonly stopLagBySpanName: boolean;
  /** The stop-lag histogram's attributes per span kind and abort code, built once each. */
  private readonly stopLagAttributes = new Map<string, Attributes>();
  /** Set by the first onEnding call: this SDK ends spans through it. */
  private sdkCallsOnEnding = false;

  constructor(config: DeadlineSpanProcessorConfig = {}) {
    this.instruments = lazyInstruments(config.meterProvider);
    this.lateGraceMs = config.lateGraceMs === undefined ? DEFAULT_LATE_GRACE_MS : checkDuration('lateGraceMs', config.lateGraceMs);
    if (config.stopLagBySpanName !== undefined && typeof config.stopLagBySpanName !== 'boolean') {
      throw new TypeError('stopLagBySpanName must be a boolean');
    }
    this.stopLagBySpanName = config.stopLagBySpanName === true;
    addSpanStateKey(this.stateKey);
  }

  onStart(span: ProcessedSpan, parentContext: Context): void {
    const deadline = deadlineIn(parentContext);
    if (deadline === undefined) return;
    showStartedSpan(span);
    const startMono = monotonicNow();
    const signed = deadline instanceof DeadlineNode ? deadline.cutoffMono - startMono : deadline.remainingMs();
    const remaining = signed > 0 ? signed : 0;
    const abortReason = abortReasonAt(deadline, signed);
    // Once the SDK has shown it calls onEnding, the start attributes wait for
    // it and go on the span in one direct write (see direct-attributes.ts).
    // Before that, and on an SDK without onEnding, they are set now.
    const startWritten = !this.sdkCallsOnEnding;
    if (startWritten) writeStartAttributes(span, startValues(deadline, remaining));

    const parentSpan = trace.getSpan(parentContext) as unknown as object | undefined;
    const parentState = parentSpan === undefined ? undefined : this.stateOf(parentSpan);
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
    const cutoffMono = deadline instanceof DeadlineNode ? deadline.cutoffMono : undefined;
    this.keepState(span, {
      deadline,
      cutoffMono,
      expiresAtMs: deadline.expiresAtMs,
      stopCutoffMono: cutoffMono ?? startMono + signed,
      startMono,
      endedAtMono: undefined,
      lastChildEndMono: undefined,
      parentState: localParent,
      startViolations,
      finished: false,
      startRemainingMs: remaining,
      startBudgetLeftMs: abortReason === undefined ? remaining : 0,
      startWritten,
      statementInFlight: false,
    });
    const hopEntry = HOP_ENTRY_ATTRIBUTES[span.kind];
    if (hopEntry !== undefined) this.instruments().remaining.record(remaining, hopEntry, parentContext);
  }

  onEnding(span: ProcessedSpan): void {
    this.sdkCallsOnEnding = true;
    const state = this.stateOf(span);
    if (state === undefined || state.finished || state.deadline === undefined) return;
    state.finished = true;
    const { deadline } = state;
    state.deadline = undefined;
    const attributes = span.attributes;
    const preset = attributes[ATTR_DEADLINE_OUTCOME] as DeadlineOutcome | undefined;
    // Signed: negative once the cutoff has passed. The outcome and the abort code below go by the same look.
    const endMono = monotonicNow();
    const left = deadline instanceof DeadlineNode ? deadline.cutoffMono - endMono : deadline.expiresAtMs - Date.now();
    state.endedAtMono = endMono;
    const abortReason = abortReasonAt(deadline, left);
    // A command guard still in flight when its span ends without an error: the span ends on the reply.
    const outcome = preset ?? (state.statementInFlight && !endedWithError(span) ? 'completed' : outcomeAt(deadline, abortReason, left));
    const remainingAtEnd = deadline instanceof DeadlineNode ? Math.max(0, left) : deadline.remainingMs();
    const record: EndRecord = { remainingAtEndMs: Math.floor(remainingAtEnd), exceeded: remainingAtEnd <= 0 };
    if (!state.startWritten) record.start = startValues(deadline, state.startRemainingMs);
    if (preset === undefined) record.outcome = outcome;

    const presetCode = attributes[ATTR_DEADLINE_ABORT_CODE];
    if (abortReason !== undefined && presetCode === undefined) {
      record.abortCode = abortCodeOf(abortReason);
      record.abortReason = describeAbortReason(abortReason);
    }
    const abortCode = presetCode ?? record.abortCode;
    if (typeof abortCode === 'string') this.instruments().aborts.add(1, { [ATTR_DEADLINE_ABORT_CODE]: abortCode });

    // When the abort reached the span: recorded by our own deadlines only; another implementation's counts from its cutoff.
    const abortMono = abortReason !== undefined && deadline instanceof DeadlineNode ? deadline.peekAbortRecordedAtMono() : undefined;
    const violations = this.violationsAtEnd(span, state, outcome, abortMono, endMono, record);
    const parentState = state.parentState;
    // Kept only for the comparison just made: do not hold the parent's state alive.
    state.parentState = undefined;
    if (parentState !== undefined) parentState.lastChildEndMono = endMono;
    if (record.stopLagMs !== undefined) {
      this.instruments().stopLag.record(record.stopLagMs, this.stopLagLabels(span, abortCode));
    }
    if (violations.length > 0) {
      record.violation = violations.join(',');
      const counter = this.instruments().violations;
      for (const violation of violations) counter.add(1, { [ATTR_DEADLINE_VIOLATION]: violation });
    }
    writeEndRecord(span, record);
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
    removeSpanStateKey(this.stateKey);
    return Promise.resolve();
  }

  private stateOf(span: object): SpanState | undefined {
    const state = (span as { [key: symbol]: SpanState | undefined })[this.stateKey];
    return state !== undefined || !this.anySealed ? state : this.sealedSpanStates.get(span);
  }

  private keepState(span: object, state: SpanState): void {
    // A store that fails throws in strict code (this module is): cheaper than asking Object.isExtensible first.
    try {
      (span as { [key: symbol]: SpanState })[this.stateKey] = state;
      return;
    } catch {
      // A sealed or frozen span: kept aside.
    }
    this.anySealed = true;
    this.sealedSpanStates.set(span, state);
  }

  /** The stop-lag histogram's attributes: bounded (kind × code) unless span names were asked for. */
  private stopLagLabels(span: ProcessedSpan, abortCode: unknown): Attributes {
    const kind = KIND_NAMES[span.kind] ?? 'internal';
    const code = typeof abortCode === 'string' ? abortCode : undefined;
    if (this.stopLagBySpanName) {
      const name = (span as { name?: unknown }).name;
      const labels: Attributes = { [ATTR_SPAN_KIND]: kind };
      if (code !== undefined) labels[ATTR_DEADLINE_ABORT_CODE] = code;
      if (typeof name === 'string') labels[ATTR_SPAN_NAME] = name;
      return labels;
    }
    const key = code === undefined ? kind : `${kind} ${code}`;
    let labels = this.stopLagAttributes.get(key);
    if (labels === undefined) {
      labels = Object.freeze(code === undefined ? { [ATTR_SPAN_KIND]: kind } : { [ATTR_SPAN_KIND]: kind, [ATTR_DEADLINE_ABORT_CODE]: code });
      // Abort codes come from this package's errors, or what a guard wrote: a few. Bounded anyway.
      if (this.stopLagAttributes.size < 64) this.stopLagAttributes.set(key, labels);
    }
    return labels;
  }

  /** The violations at the span's end; sets record.stopLagMs on the way (see stop-rule.ts). */
  private violationsAtEnd(
    span: ProcessedSpan,
    state: SpanState,
    outcome: DeadlineOutcome,
    abortMono: number | undefined,
    endMono: number,
    record: EndRecord,
  ): readonly DeadlineViolation[] {
    // Work that was refused never ran, so it cannot have run late.
    const ran = outcome !== 'not_started';
    let endedAfterParent = false;
    let endedAfterDeadline = false;
    const parentEndMono = state.parentState?.endedAtMono;
    // The usual case, a span that ended before its cutoff and after no parent, costs nothing more.
    if (ran && (endMono >= state.stopCutoffMono || parentEndMono !== undefined)) {
      const judged = judgeStop(
        {
          startMono: state.startMono,
          endMono,
          cutoffMono: state.stopCutoffMono,
          abortMono,
          lastChildEndMono: state.lastChildEndMono,
          parentEndMono,
          cutByPackage: cutByPackage(span),
        },
        this.lateGraceMs,
      );
      record.stopLagMs = judged.stopLagMs === undefined ? undefined : Math.round(judged.stopLagMs);
      endedAfterParent = judged.endedAfterParent;
      endedAfterDeadline = judged.endedAfterDeadline;
    }
    // The usual case: nothing to report, nothing to allocate.
    if (state.startViolations.length === 0 && !endedAfterParent && !endedAfterDeadline) return NO_VIOLATIONS;
    const violations = state.startViolations.filter((v) => ran || v === 'later_than_parent');
    if (endedAfterParent) violations.push('ended_after_parent');
    if (endedAfterDeadline) violations.push('ended_after_deadline');
    return violations;
  }
}

/** A guard of this package cut the span's work: it wrote the abort and a cut outcome on the span before it ended. */
function cutByPackage(span: ProcessedSpan): boolean {
  const attributes = span.attributes;
  return attributes[ATTR_DEADLINE_ABORT_CODE] !== undefined && CUT_OUTCOMES.has(attributes[ATTR_DEADLINE_OUTCOME]);
}

/**
 * The operation is read when the attributes are written, not when the span
 * started: a server takes over the node the global propagator built from the
 * request ('remote') under its own name after its span started, and the span
 * must name the deadline as the spans under it do.
 */
function startValues(deadline: Deadline, remaining: number): StartValues {
  return {
    atMs: Math.floor(deadline.expiresAtMs),
    remainingMs: Math.floor(remaining),
    budgetMs: Math.round(deadline.budgetMs),
    source: deadline.source,
    operation: deadline.operation,
    wireSkewMs: deadline.wireSkewMs,
    queueDwellMs: deadline.queueDwellMs,
  };
}

/** The start attributes, through setAttributes, for a span whose end may never reach onEnding. */
function writeStartAttributes(span: ProcessedSpan, start: StartValues): void {
  const attributes: AttributeMap = {};
  fillStartAttributes(attributes, start);
  span.setAttributes(attributes);
}

function longestString(record: EndRecord): number {
  return Math.max(record.start?.operation.length ?? 0, record.abortReason?.length ?? 0, record.violation?.length ?? 0, record.abortCode?.length ?? 0);
}

/**
 * Writes `record` on the span: directly into its attribute map when the SDK
 * allows it (see direct-attributes.ts), else through setAttributes.
 */
function writeEndRecord(span: ProcessedSpan, record: EndRecord): void {
  const direct = directAttributes(span, MAX_END_RECORD_KEYS, longestString(record));
  if (direct === undefined) {
    const attributes: AttributeMap = {};
    fillAttributes(attributes, record);
    span.setAttributes(attributes);
    return;
  }
  countAdded(span, fillAttributes(direct, record));
}

/** Adds the start attributes to `target` (see fillAttributes); returns how many keys were new. */
function fillStartAttributes(target: AttributeMap, start: StartValues): number {
  let added = target['deadline.at_ms' satisfies typeof ATTR_DEADLINE_AT_MS] === undefined ? 1 : 0;
  target['deadline.at_ms' satisfies typeof ATTR_DEADLINE_AT_MS] = start.atMs;
  added += target['deadline.remaining_ms' satisfies typeof ATTR_DEADLINE_REMAINING_MS] === undefined ? 1 : 0;
  target['deadline.remaining_ms' satisfies typeof ATTR_DEADLINE_REMAINING_MS] = start.remainingMs;
  added += target['deadline.budget_ms' satisfies typeof ATTR_DEADLINE_BUDGET_MS] === undefined ? 1 : 0;
  target['deadline.budget_ms' satisfies typeof ATTR_DEADLINE_BUDGET_MS] = start.budgetMs;
  added += target['deadline.source' satisfies typeof ATTR_DEADLINE_SOURCE] === undefined ? 1 : 0;
  target['deadline.source' satisfies typeof ATTR_DEADLINE_SOURCE] = start.source;
  added += target['deadline.operation' satisfies typeof ATTR_DEADLINE_OPERATION] === undefined ? 1 : 0;
  target['deadline.operation' satisfies typeof ATTR_DEADLINE_OPERATION] = start.operation;
  if (start.wireSkewMs !== undefined) {
    added += target['deadline.wire_skew_ms' satisfies typeof ATTR_DEADLINE_WIRE_SKEW_MS] === undefined ? 1 : 0;
    target['deadline.wire_skew_ms' satisfies typeof ATTR_DEADLINE_WIRE_SKEW_MS] = start.wireSkewMs;
  }
  if (start.queueDwellMs !== undefined) {
    added += target['deadline.queue_dwell_ms' satisfies typeof ATTR_DEADLINE_QUEUE_DWELL_MS] === undefined ? 1 : 0;
    target['deadline.queue_dwell_ms' satisfies typeof ATTR_DEADLINE_QUEUE_DWELL_MS] = start.queueDwellMs;
  }
  return added;
}

/**
 * Adds `record` to `target` and returns how many keys were new. Literal
 * property names: V8 compiles these to named stores, which keep a map with
 * many properties a fast object, and the reads that tell a new key to named
 * loads (the SDK never stores an undefined value, and directAttributes has
 * checked the map's prototype is Object.prototype), where hasOwnProperty
 * (isNewKey) cost about 115 instructions a key and a read through a variable
 * key more. `satisfies` ties each literal to its public constant.
 */
function fillAttributes(target: AttributeMap, record: EndRecord): number {
  let added = record.start === undefined ? 0 : fillStartAttributes(target, record.start);
  added += target['deadline.remaining_at_end_ms' satisfies typeof ATTR_DEADLINE_REMAINING_AT_END_MS] === undefined ? 1 : 0;
  target['deadline.remaining_at_end_ms' satisfies typeof ATTR_DEADLINE_REMAINING_AT_END_MS] = record.remainingAtEndMs;
  added += target['deadline.exceeded' satisfies typeof ATTR_DEADLINE_EXCEEDED] === undefined ? 1 : 0;
  target['deadline.exceeded' satisfies typeof ATTR_DEADLINE_EXCEEDED] = record.exceeded;
  if (record.outcome !== undefined) {
    added += target['deadline.outcome' satisfies typeof ATTR_DEADLINE_OUTCOME] === undefined ? 1 : 0;
    target['deadline.outcome' satisfies typeof ATTR_DEADLINE_OUTCOME] = record.outcome;
  }
  if (record.abortCode !== undefined) {
    added += target['deadline.abort.code' satisfies typeof ATTR_DEADLINE_ABORT_CODE] === undefined ? 1 : 0;
    target['deadline.abort.code' satisfies typeof ATTR_DEADLINE_ABORT_CODE] = record.abortCode;
  }
  if (record.abortReason !== undefined) {
    added += target['deadline.abort.reason' satisfies typeof ATTR_DEADLINE_ABORT_REASON] === undefined ? 1 : 0;
    target['deadline.abort.reason' satisfies typeof ATTR_DEADLINE_ABORT_REASON] = record.abortReason;
  }
  if (record.stopLagMs !== undefined) {
    added += target['deadline.stop_lag_ms' satisfies typeof ATTR_DEADLINE_STOP_LAG_MS] === undefined ? 1 : 0;
    target['deadline.stop_lag_ms' satisfies typeof ATTR_DEADLINE_STOP_LAG_MS] = record.stopLagMs;
  }
  if (record.violation !== undefined) {
    added += target['deadline.late' satisfies typeof ATTR_DEADLINE_LATE] === undefined ? 1 : 0;
    target['deadline.late' satisfies typeof ATTR_DEADLINE_LATE] = true;
    added += target['deadline.violation' satisfies typeof ATTR_DEADLINE_VIOLATION] === undefined ? 1 : 0;
    target['deadline.violation' satisfies typeof ATTR_DEADLINE_VIOLATION] = record.violation;
  }
  return added;
}

