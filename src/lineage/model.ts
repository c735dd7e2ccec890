import { ATTR_DEADLINE_ABORT_CODE, ATTR_DEADLINE_AT_MS, ATTR_DEADLINE_BUDGET_MS, ATTR_DEADLINE_EXCEEDED, ATTR_DEADLINE_LATE, ATTR_DEADLINE_OUTCOME, ATTR_DEADLINE_QUEUE_DWELL_MS, ATTR_DEADLINE_REMAINING_AT_END_MS, ATTR_DEADLINE_REMAINING_MS, ATTR_DEADLINE_STOP_LAG_MS, ATTR_DEADLINE_VIOLATION, ATTR_DEADLINE_WIRE_SKEW_MS } from '../attributes';

/** An attribute value as both input formats can carry it (arrays and maps arrive as JSON text). */
export type TagValue = string | number | boolean;

/** One span, the same whichever format it was read from. */
export interface LineageSpan {
  traceId: string;
  spanId: string;
  /** Undefined for a root; may name a span that is not in the trace (a remote parent). */
  parentSpanId: string | undefined;
  service: string;
  name: string;
  /** `server`, `client`, `producer`, `consumer` or `internal`. */
  kind: string;
  /** Epoch microseconds: Jaeger's unit, and exact enough for millisecond output. */
  startUs: number;
  endUs: number;
  attributes: Record<string, TagValue>;
}

export interface LineageTrace {
  traceId: string;
  spans: LineageSpan[];
}

/** What the span processor recorded on a span, read back tolerantly (string tags are accepted). */
export interface DeadlineFacts {
  /** False when the span ran without any deadline. */
  present: boolean;
  atMs: number | undefined;
  budgetMs: number | undefined;
  remainingMs: number | undefined;
  remainingAtEndMs: number | undefined;
  outcome: string | undefined;
  exceeded: boolean;
  late: boolean;
  violations: string[];
  abortCode: string | undefined;
  queueDwellMs: number | undefined;
  wireSkewMs: number | undefined;
  /** From the later of the cutoff and the abort reaching the span to its end (spans that ended after their cutoff). */
  stopLagMs: number | undefined;
}

function numberOf(value: TagValue | undefined): number | undefined {
  const n = typeof value === 'number' || (typeof value === 'string' && value.trim() !== '') ? Number(value) : NaN;
  return Number.isFinite(n) ? n : undefined;
}

function booleanOf(value: TagValue | undefined): boolean {
  return value === true || value === 'true';
}

function stringOf(value: TagValue | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : String(value);
}

export function deadlineFacts(span: LineageSpan): DeadlineFacts {
  const a = span.attributes;
  const violation = stringOf(a[ATTR_DEADLINE_VIOLATION]);
  const violations = violation === undefined ? [] : violation.split(',').filter((v) => v !== '');
  return {
    present: a[ATTR_DEADLINE_AT_MS] !== undefined,
    atMs: numberOf(a[ATTR_DEADLINE_AT_MS]),
    budgetMs: numberOf(a[ATTR_DEADLINE_BUDGET_MS]),
    remainingMs: numberOf(a[ATTR_DEADLINE_REMAINING_MS]),
    remainingAtEndMs: numberOf(a[ATTR_DEADLINE_REMAINING_AT_END_MS]),
    outcome: stringOf(a[ATTR_DEADLINE_OUTCOME]),
    exceeded: booleanOf(a[ATTR_DEADLINE_EXCEEDED]),
    // A violation list without the flag still counts: the flag is only the searchable summary.
    late: booleanOf(a[ATTR_DEADLINE_LATE]) || violations.length > 0,
    violations,
    abortCode: stringOf(a[ATTR_DEADLINE_ABORT_CODE]),
    queueDwellMs: numberOf(a[ATTR_DEADLINE_QUEUE_DWELL_MS]),
    wireSkewMs: numberOf(a[ATTR_DEADLINE_WIRE_SKEW_MS]),
    stopLagMs: numberOf(a[ATTR_DEADLINE_STOP_LAG_MS]),
  };
}

/** Work refused for lack of budget: never started (`not_started`), or a retry stopped with INSUFFICIENT_BUDGET. */
export function isRefused(facts: DeadlineFacts): boolean {
  return facts.outcome === 'not_started' || facts.abortCode === 'INSUFFICIENT_BUDGET';
}

/** Groups spans by trace id, keeping the order in which traces first appear. */
export function groupTraces(spans: Iterable<LineageSpan>): LineageTrace[] {
  const byId = new Map<string, LineageTrace>();
  for (const span of spans) {
    const entry = byId.get(span.traceId) ?? { traceId: span.traceId, spans: [] };
    entry.spans.push(span);
    byId.set(span.traceId, entry);
  }
  return [...byId.values()];
}

/** Trace ids compare case-insensitively and without leading zeros (Jaeger may shorten 64-bit ids). */
export function sameTraceId(a: string, b: string): boolean {
  const norm = (id: string) => id.toLowerCase().replace(/^0+/, '');
  return norm(a) === norm(b);
}
