/**
 * Span attribute, metric and wire names. These strings are the public
 * contract; the package exports them grouped (DeadlineAttributes,
 * DeadlineMetrics, DeadlineHeaders), and the flat constants are for the
 * package's own code.
 */

export const ATTR_DEADLINE_AT_MS = 'deadline.at_ms';
export const ATTR_DEADLINE_REMAINING_MS = 'deadline.remaining_ms';
export const ATTR_DEADLINE_BUDGET_MS = 'deadline.budget_ms';
export const ATTR_DEADLINE_SOURCE = 'deadline.source';
export const ATTR_DEADLINE_OPERATION = 'deadline.operation';
export const ATTR_DEADLINE_WIRE_SKEW_MS = 'deadline.wire_skew_ms';
export const ATTR_DEADLINE_QUEUE_DWELL_MS = 'deadline.queue_dwell_ms';
export const ATTR_DEADLINE_REMAINING_AT_END_MS = 'deadline.remaining_at_end_ms';
export const ATTR_DEADLINE_EXCEEDED = 'deadline.exceeded';
export const ATTR_DEADLINE_OUTCOME = 'deadline.outcome';
export const ATTR_DEADLINE_ABORT_CODE = 'deadline.abort.code';
export const ATTR_DEADLINE_ABORT_REASON = 'deadline.abort.reason';
export const ATTR_DEADLINE_LATE = 'deadline.late';
export const ATTR_DEADLINE_VIOLATION = 'deadline.violation';
/** Ms from the later of the cutoff and the abort reaching the span to its end; only on spans that ended after their cutoff. */
export const ATTR_DEADLINE_STOP_LAG_MS = 'deadline.stop_lag_ms';

export type DeadlineOutcome = 'completed' | 'expired' | 'cancelled' | 'not_started' | 'unknown';
export type DeadlineViolation =
  | 'later_than_parent'
  | 'ended_after_parent'
  | 'ended_after_deadline'
  | 'started_after_expiry'
  /** Extension: work started under a deadline that had already been cancelled. */
  | 'started_after_cancel';

export const METRIC_VIOLATIONS = 'deadline.violations';
export const METRIC_ABORTS = 'deadline.aborts';
export const METRIC_REMAINING = 'deadline.remaining';
/** Histogram of `deadline.stop_lag_ms`, by span kind and abort code (and span name when asked for). */
export const METRIC_STOP_LAG = 'deadline.stop_lag';
/** Attribute on the `deadline.remaining` and `deadline.stop_lag` histograms. */
export const ATTR_SPAN_KIND = 'span.kind';
/** Attribute on the `deadline.stop_lag` histogram, only with the processor's `stopLagBySpanName` option. */
export const ATTR_SPAN_NAME = 'span.name';

export const HEADER_REMAINING_MS = 'x-deadline-remaining-ms';
export const HEADER_AT_MS = 'x-deadline-at-ms';
export const HEADER_BAGGAGE = 'baggage';
export const HEADER_GRPC_TIMEOUT = 'grpc-timeout';
export const HEADER_CONNECT_TIMEOUT_MS = 'connect-timeout-ms';
export const HEADER_RUN_DEADLINE_MS = 'x-run-deadline-ms';
/** Set to `1` on the early-reject reply of a server that refused a request for lack of time. */
export const HEADER_DEADLINE_EXPIRED = 'x-deadline-expired';
export const BAGGAGE_DEADLINE_KEY = 'deadline.at_ms';

/** Span attribute names the span processor (and the instrumentation's observe mode) writes. */
export const DeadlineAttributes = {
  AT_MS: ATTR_DEADLINE_AT_MS,
  REMAINING_MS: ATTR_DEADLINE_REMAINING_MS,
  BUDGET_MS: ATTR_DEADLINE_BUDGET_MS,
  SOURCE: ATTR_DEADLINE_SOURCE,
  OPERATION: ATTR_DEADLINE_OPERATION,
  WIRE_SKEW_MS: ATTR_DEADLINE_WIRE_SKEW_MS,
  QUEUE_DWELL_MS: ATTR_DEADLINE_QUEUE_DWELL_MS,
  REMAINING_AT_END_MS: ATTR_DEADLINE_REMAINING_AT_END_MS,
  EXCEEDED: ATTR_DEADLINE_EXCEEDED,
  OUTCOME: ATTR_DEADLINE_OUTCOME,
  ABORT_CODE: ATTR_DEADLINE_ABORT_CODE,
  ABORT_REASON: ATTR_DEADLINE_ABORT_REASON,
  LATE: ATTR_DEADLINE_LATE,
  VIOLATION: ATTR_DEADLINE_VIOLATION,
  STOP_LAG_MS: ATTR_DEADLINE_STOP_LAG_MS,
  WOULD_ABORT: 'deadline.would_abort',
  WOULD_REJECT: 'deadline.would_reject',
} as const;

/** Metric instrument names, and the attribute on the `deadline.remaining` histogram. */
export const DeadlineMetrics = {
  VIOLATIONS: METRIC_VIOLATIONS,
  ABORTS: METRIC_ABORTS,
  REMAINING: METRIC_REMAINING,
  STOP_LAG: METRIC_STOP_LAG,
  SPAN_KIND_ATTRIBUTE: ATTR_SPAN_KIND,
  SPAN_NAME_ATTRIBUTE: ATTR_SPAN_NAME,
} as const;

/** Wire names: the headers written and read, and the baggage key. */
export const DeadlineHeaders = {
  REMAINING_MS: HEADER_REMAINING_MS,
  AT_MS: HEADER_AT_MS,
  BAGGAGE: HEADER_BAGGAGE,
  GRPC_TIMEOUT: HEADER_GRPC_TIMEOUT,
  CONNECT_TIMEOUT_MS: HEADER_CONNECT_TIMEOUT_MS,
  RUN_DEADLINE_MS: HEADER_RUN_DEADLINE_MS,
  EXPIRED: HEADER_DEADLINE_EXPIRED,
  BAGGAGE_KEY: BAGGAGE_DEADLINE_KEY,
} as const;
