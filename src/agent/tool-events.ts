import { context, SpanKind, SpanStatusCode, trace, type Attributes, type Span } from '@opentelemetry/api';
import { getDeadline, setDeadline } from '../context';
import type { Deadline, ManagedDeadline } from '../deadline';
import { abortCodeOf, describeAbortReason } from '../errors';
import { checkOperation, endRefusedSpan, errorType, isRefusal, openDeadline, TRACER_NAME } from '../open';
import { checkContextManager } from '../context-check';
import { checkDuration } from '../time';
import { ATTR_DEADLINE_ABORT_CODE, ATTR_DEADLINE_ABORT_REASON, ATTR_DEADLINE_AT_MS, ATTR_DEADLINE_REMAINING_MS } from '../attributes';
import { GEN_AI_OPERATION_EXECUTE_TOOL, ToolAttributes, ToolEvents, type ToolEventName } from './attributes';
import { admit } from './admit';
import { deadlineCodeOf } from './replies';

const TOOL_EVENTS: readonly string[] = Object.values(ToolEvents);

export interface ToolEventDetails {
  /** The tool's name: `gen_ai.tool.name`. */
  operation: string;
  /** The id the model gave this tool call: `gen_ai.tool.call.id`. */
  toolCallId?: string;
  /** Default 1. */
  attempt?: number;
  /** The span that gets the event. Default: the active span. */
  span?: Span;
  /** The span id of the call that started this one, for an event on a span that is not the tool's own. */
  parentCallId?: string;
  /** Default: the deadline active in OTel context. */
  deadline?: Deadline;
  /** On `tool.aborted`: the abort reason or the error. Only its code and type are recorded. */
  reason?: unknown;
}

/** A model's tool call id is an opaque short string; anything else is a caller's mistake. */
function checkToolCallId(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || value.length === 0 || value.length > 256) {
    throw new TypeError('toolCallId must be a non-empty string of at most 256 characters');
  }
  return value;
}

/** Adds one tool lifecycle event to a span, with ids and timings only: no parameter can carry arguments or bodies. */
export function recordToolEvent(name: ToolEventName, details: ToolEventDetails): void {
  if (!TOOL_EVENTS.includes(name)) throw new TypeError(`unknown tool event ${String(name)}`);
  const toolCallId = checkToolCallId(details.toolCallId);
  const span = details.span ?? trace.getActiveSpan();
  if (span === undefined) return;
  const deadline = details.deadline ?? getDeadline();
  const attributes: Attributes = {
    [ToolAttributes.GEN_AI_TOOL_NAME]: details.operation,
    [ToolAttributes.ATTEMPT]: details.attempt ?? 1,
  };
  if (toolCallId !== undefined) attributes[ToolAttributes.GEN_AI_TOOL_CALL_ID] = toolCallId;
  if (details.parentCallId !== undefined) attributes[ToolAttributes.PARENT_CALL_ID] = details.parentCallId;
  if (deadline !== undefined) {
    attributes[ATTR_DEADLINE_AT_MS] = Math.floor(deadline.expiresAtMs);
    attributes[ATTR_DEADLINE_REMAINING_MS] = Math.floor(deadline.remainingMs());
  }
  const { reason } = details;
  if (name === 'tool.aborted' && reason !== undefined) {
    const code = deadlineCodeOf(reason) ?? (isRefusal(reason) ? abortCodeOf(reason) : undefined);
    if (code !== undefined) attributes[ATTR_DEADLINE_ABORT_CODE] = code;
    attributes[code === undefined ? ToolAttributes.ERROR : ATTR_DEADLINE_ABORT_REASON] = describeAbortReason(reason);
  }
  span.addEvent(name, attributes, Date.now());
}

export interface ToolOptions {
  /** The id the model gave this tool call, recorded as `gen_ai.tool.call.id`. Default: none. */
  toolCallId?: string;
  /** Which attempt this call is, when a caller retries it. Default 1. */
  attempt?: number;
  /** The tool's own cap; it is clamped under the caller's deadline. Default: the caller's deadline. */
  timeoutMs?: number;
  /** Refuse (tool.aborted, span outcome `not_started`) unless this much is usable. Default 0. */
  minUsefulMs?: number;
  /** Time the caller keeps back; counted against `minUsefulMs`. Default 0. */
  reserveMs?: number;
  /** Default INTERNAL. */
  kind?: SpanKind;
}

/** What the tool function receives. */
export interface ToolCall {
  readonly operation: string;
  readonly attempt: number;
  /** The trace id. */
  readonly requestId: string;
  /** This call's span id. */
  readonly callId: string;
  /** The model's id for this call, as given in `toolCallId`. */
  readonly toolCallId: string | undefined;
  readonly deadline: Deadline | undefined;
  /** The deadline's signal (armed on first access), or undefined without a deadline. */
  readonly signal: AbortSignal | undefined;
}

/**
 * Runs one tool call in a span named `operation` with the GenAI tool attributes,
 * recording `tool.queued`, `tool.started`, then `tool.completed` or `tool.aborted`.
 * `timeoutMs` gives it its own child deadline; `minUsefulMs` refuses it up front.
 */
export async function runTool<T>(operation: string, fn: (call: ToolCall) => Promise<T> | T, options: ToolOptions = {}): Promise<T> {
  checkOperation(operation);
  if (typeof fn !== 'function') throw new TypeError('fn must be a function');
  if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
  checkContextManager();
  const attempt = options.attempt ?? 1;
  if (!Number.isInteger(attempt) || attempt < 1) throw new RangeError(`attempt must be an integer ≥ 1, got ${String(attempt)}`);
  const minUsefulMs = options.minUsefulMs === undefined ? 0 : checkDuration('minUsefulMs', options.minUsefulMs);
  const reserveMs = options.reserveMs === undefined ? 0 : checkDuration('reserveMs', options.reserveMs);
  const toolCallId = checkToolCallId(options.toolCallId);

  const outer = context.active();
  const parentDeadline = getDeadline(outer);
  const calledAt = Date.now();
  const attributes: Attributes = { [ToolAttributes.GEN_AI_OPERATION_NAME]: GEN_AI_OPERATION_EXECUTE_TOOL, [ToolAttributes.GEN_AI_TOOL_NAME]: operation };
  if (toolCallId !== undefined) attributes[ToolAttributes.GEN_AI_TOOL_CALL_ID] = toolCallId;
  // The span's parent is the calling span: no parent call id to repeat on the events.
  const event = (name: ToolEventName, span: Span, deadline: Deadline | undefined, reason?: unknown) =>
    recordToolEvent(name, { operation, toolCallId, attempt, span, deadline, reason });

  let own: ManagedDeadline | undefined;
  let refusal: unknown;
  try {
    if (options.timeoutMs !== undefined) {
      own = openDeadline({ operation, timeoutMs: options.timeoutMs, minUsefulMs, reserveMs });
    } else if (minUsefulMs > 0 || reserveMs > 0) {
      admit(minUsefulMs, { reserveMs, operation });
    }
  } catch (err) {
    if (!isRefusal(err)) throw err;
    refusal = err;
  }

  const deadline = own ?? parentDeadline;
  const base = own === undefined ? outer : setDeadline(outer, own);
  const span = trace.getTracer(TRACER_NAME).startSpan(operation, { kind: options.kind, startTime: calledAt, attributes }, base);
  event('tool.queued', span, deadline);
  if (refusal !== undefined) {
    event('tool.aborted', span, deadline, refusal);
    endRefusedSpan(span, refusal);
    throw refusal;
  }
  const { traceId: requestId, spanId: callId } = span.spanContext();
  const call: ToolCall = {
    operation,
    attempt,
    requestId,
    callId,
    toolCallId,
    deadline,
    get signal() {
      return deadline?.signal;
    },
  };
  try {
    event('tool.started', span, deadline);
    const value = await context.with(trace.setSpan(base, span), () => fn(call));
    event('tool.completed', span, deadline);
    return value;
  } catch (err) {
    event('tool.aborted', span, deadline, deadline?.aborted ? deadline.abortReason : err);
    span.setStatus({ code: SpanStatusCode.ERROR, message: deadline?.aborted ? abortCodeOf(deadline.abortReason) : errorType(err) });
    throw err;
  } finally {
    span.end();
    own?.dispose();
  }
}
