import { context, SpanStatusCode, trace, type Span } from '@opentelemetry/api';
import { openDeadlineUnder, type Deadline, type DeadlineOptions, type ManagedDeadline } from './deadline';
import { getDeadline, setDeadline } from './context';
import { abortCodeOf, isDeadlineError } from './errors';
import { ATTR_DEADLINE_OUTCOME } from './attributes';
import { checkContextManager } from './context-check';

export const TRACER_NAME = 'otel-deadline';

/**
 * Opens a deadline. Without `parent` it is clamped under the deadline active in
 * OTel context; `parent: null` opens a root, which is what an edge does.
 */
export function openDeadline(options: DeadlineOptions): ManagedDeadline {
  return openDeadlineUnder(parentFor(options), options);
}

/** The parent `options` name, or the deadline active in OTel context when they name none. */
function parentFor(options: DeadlineOptions): Deadline | null | undefined {
  return options?.parent === undefined ? getDeadline() : options.parent;
}

/** True for the errors openDeadline throws to refuse work (not for bad arguments). */
export function isRefusal(err: unknown): boolean {
  return isDeadlineError(err);
}

/** Ends a span for work that was refused before it started. */
export function endRefusedSpan(span: Span, err: unknown): void {
  span.setAttribute(ATTR_DEADLINE_OUTCOME, 'not_started');
  span.setStatus({ code: SpanStatusCode.ERROR, message: abortCodeOf(err) });
  span.end();
}

/**
 * Runs `fn` under a new deadline: the deadline is active in OTel context and a
 * span named `operation` is open for the duration. When `fn` settles the span
 * ends, then the deadline is disposed, and fn's result or error is passed on.
 * A refusal (expired parent, too little budget) still produces a span, with
 * outcome `not_started`, and then throws.
 */
export async function withDeadline<T>(options: DeadlineOptions, fn: (deadline: Deadline) => Promise<T> | T): Promise<T> {
  if (typeof fn !== 'function') throw new TypeError('fn must be a function');
  return runUnder(options, fn, 0);
}

/**
 * @internal withDeadline for work that must end `keepBeforeParentMs` before
 * the active deadline (withAdmission): the reserve comes off the parent's
 * cutoff inside the opening, on its one clock read.
 */
export function withDeadlineKeeping<T>(options: DeadlineOptions, keepBeforeParentMs: number, fn: (deadline: Deadline) => Promise<T> | T): Promise<T> {
  return runUnder(options, fn, keepBeforeParentMs);
}

async function runUnder<T>(options: DeadlineOptions, fn: (deadline: Deadline) => Promise<T> | T, keepBeforeParentMs: number): Promise<T> {
  checkContextManager();
  const tracer = trace.getTracer(TRACER_NAME);
  const outer = context.active();
  let deadline: ManagedDeadline;
  try {
    deadline = openDeadlineUnder(parentFor(options), options, keepBeforeParentMs);
  } catch (err) {
    if (isRefusal(err)) endRefusedSpan(tracer.startSpan(options.operation, {}, outer), err);
    throw err;
  }
  const inner = setDeadline(outer, deadline);
  return tracer.startActiveSpan(options.operation, {}, inner, async (span) => {
    try {
      return await fn(deadline);
    } catch (err) {
      // Status only: an error message may carry user data, and telemetry must not.
      span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.name : typeof err });
      throw err;
    } finally {
      span.end();
      deadline.dispose();
    }
  });
}
