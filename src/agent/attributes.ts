/**
 * Span event and attribute names used by the agent helpers. Like the core's
 * names in ../attributes.ts, these strings are the public contract; the
 * package exports them grouped (RetryEvent, ToolEvents, ToolAttributes), and
 * the helpers use the same groups.
 */

/** The retry event and its attributes. */
export const RetryEvent = {
  /** One event per retry attempt (and one for an attempt refused for lack of budget). */
  NAME: 'deadline.retry.attempt',
  ATTEMPT: 'deadline.retry.attempt',
  /** Whether the attempt was actually started (false: refused before sleeping or calling). */
  STARTED: 'deadline.retry.started',
  BACKOFF_MS: 'deadline.retry.backoff_ms',
  /** Why the loop went on or stopped after this attempt; see RetryDecision. */
  DECISION: 'deadline.retry.decision',
  /** A telemetry-safe description of the attempt's error (type name and code, never the message). */
  ERROR: 'deadline.retry.error',
} as const;

export type RetryDecision =
  | 'succeeded'
  | 'retry'
  | 'not_retryable'
  | 'attempts_exhausted'
  | 'insufficient_budget'
  | 'deadline_exceeded'
  | 'cancelled'
  | 'deadline_expired_reply';

/** Tool-call event names. */
export const ToolEvents = {
  QUEUED: 'tool.queued',
  STARTED: 'tool.started',
  COMPLETED: 'tool.completed',
  ABORTED: 'tool.aborted',
} as const;

export type ToolEventName = (typeof ToolEvents)[keyof typeof ToolEvents];

/**
 * `gen_ai.operation.name` on a runTool span: OpenTelemetry GenAI semantic conventions for tool execution
 * (incubating: copied here, as contrib instrumentations do, rather than imported).
 */
export const GEN_AI_OPERATION_EXECUTE_TOOL = 'execute_tool';

/** The attributes on tool spans and events. */
export const ToolAttributes = {
  GEN_AI_OPERATION_NAME: 'gen_ai.operation.name',
  /** The tool's name (runTool's `operation`): on the tool span and on every tool event. */
  GEN_AI_TOOL_NAME: 'gen_ai.tool.name',
  /** The id the model gave this tool call (`toolCallId`), when the caller passes it. */
  GEN_AI_TOOL_CALL_ID: 'gen_ai.tool.call.id',
  /** The span id of the call that started this one, when `recordToolEvent` is told it (on a span that is not the tool's own). */
  PARENT_CALL_ID: 'tool.parent_call_id',
  ATTEMPT: 'tool.attempt',
  /** On `tool.aborted` for a failure that was not a deadline abort: the error's type name and code. */
  ERROR: 'tool.error',
  /** On a `detach` root span: the trace the durable work was declared from. */
  DETACHED_FROM_TRACE_ID: 'deadline.detached_from.trace_id',
  /** @deprecated No longer recorded: it repeated the trace id every event already has. */
  REQUEST_ID: 'tool.request_id',
  /** @deprecated No longer recorded: it repeated the span id; the model's call id is `gen_ai.tool.call.id`. */
  CALL_ID: 'tool.call_id',
  /** @deprecated No longer recorded: `gen_ai.tool.name` holds the tool's name. */
  OPERATION: 'tool.operation',
  /** @deprecated No longer recorded: it repeated the event's own timestamp. */
  OBSERVED_AT_MS: 'tool.observed_at_ms',
} as const;
