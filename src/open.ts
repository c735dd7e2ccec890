import { context, SpanStatusCode, trace, type Context, type Span } from '@opentelemetry/api';
import type { Deadline, DeadlineOptions, ManagedDeadline } from './deadline';
import { cutoffOf, DeadlineNode } from './deadline-node';
import { getDeadline, setDeadline } from './context';
import { abortCodeOf, DeadlineCancelledError, DeadlineExceededError, InsufficientBudgetError, isDeadlineError } from './errors';
import { checkBudget, checkDuration, checkEpoch, MAX_DEADLINE_MS, minCutoff, monotonicNow } from './time';
import { ATTR_DEADLINE_OUTCOME } from './attributes';
import { checkContextManager } from './context-check';

export const TRACER_NAME = 'otel-deadline';

/** Opens a deadline, clamped under the active one unless `parent` is given; `parent: null` opens a root. */
export function openDeadline(options: DeadlineOptions): ManagedDeadline {
  return openDeadlineUnder(parentFor(options), options);
}

/** @internal */
export function checkOperation(operation: unknown): string {
  if (typeof operation !== 'string' || operation.length === 0) throw new TypeError('operation must be a non-empty string');
  return operation;
}

function checkParent(parent: unknown): Deadline | undefined {
  if (parent === undefined || parent === null) return undefined;
  const candidate = parent as Partial<Deadline>;
  if (typeof candidate.expiresAtMs !== 'number' || typeof candidate.remainingMs !== 'function') {
    throw new TypeError('parent must be a Deadline, null or undefined');
  }
  return parent as Deadline;
}

/** @internal */
export function checkSignal(signal: unknown): AbortSignal | undefined {
  if (signal === undefined) return undefined;
  if (!(signal instanceof AbortSignal)) throw new TypeError('signal must be an AbortSignal');
  return signal;
}

/** @internal The refusal for work opened under a parent that already aborted: its expiry, or a cancellation. */
export function refusalFromParent(operation: string, expiresAtMs: number, reason: unknown): Error {
  return reason instanceof DeadlineExceededError
    ? new DeadlineExceededError(operation, expiresAtMs, { cause: reason })
    : new DeadlineCancelledError(operation, reason);
}

/**
 * Validates options and opens a deadline under `parent` (undefined: a root), refusing before anything
 * is allocated. `keepBeforeParentMs` ends it that long before the parent's cutoff, on one clock read.
 */
export function openDeadlineUnder(parentInput: Deadline | null | undefined, options: DeadlineOptions, keepBeforeParentMs = 0): DeadlineNode {
  if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
  const operation = checkOperation(options.operation);
  const hasTimeout = options.timeoutMs !== undefined;
  const hasExpiry = options.expiresAtMs !== undefined;
  if (hasTimeout === hasExpiry) {
    throw new TypeError(`give exactly one of timeoutMs and expiresAtMs (got ${hasTimeout ? 'both' : 'neither'})`);
  }
  const parent = checkParent(parentInput);
  const signal = checkSignal(options.signal);
  const minUsefulMs = options.minUsefulMs === undefined ? 0 : checkDuration('minUsefulMs', options.minUsefulMs);
  const reserveMs = options.reserveMs === undefined ? 0 : checkDuration('reserveMs', options.reserveMs);

  // Clock read order keeps a pause on the safe side: the wire cutoff is never later than the
  // enforced one, and the enforced one never later than the one asked for.
  const earlyEpoch = hasTimeout ? Date.now() : 0;
  const nowMono = monotonicNow();
  const nowEpoch = hasTimeout ? earlyEpoch : Date.now();
  let ownCutoff: number;
  let ownExpiresAt: number;
  let budgetMs: number;
  if (hasTimeout) {
    budgetMs = checkBudget('timeoutMs', options.timeoutMs);
    ownCutoff = nowMono + budgetMs;
    ownExpiresAt = nowEpoch + budgetMs;
  } else {
    ownExpiresAt = checkEpoch('expiresAtMs', options.expiresAtMs);
    if (ownExpiresAt - nowEpoch > MAX_DEADLINE_MS) {
      throw new RangeError(`expiresAtMs must be at most ${MAX_DEADLINE_MS} ms (100 days) from now, got ${ownExpiresAt - nowEpoch} ms from now`);
    }
    ownCutoff = nowMono + (ownExpiresAt - nowEpoch);
    budgetMs = ownExpiresAt - nowEpoch;
  }

  let cutoffMono = ownCutoff;
  let expiresAtMs = ownExpiresAt;
  let keptBack = false;
  if (parent !== undefined) {
    const parentCutoff = cutoffOf(parent, nowMono) - keepBeforeParentMs;
    cutoffMono = minCutoff(ownCutoff, parentCutoff);
    keptBack = cutoffMono === parentCutoff && keepBeforeParentMs > 0;
    if (cutoffMono === parentCutoff) expiresAtMs = parent.expiresAtMs - keepBeforeParentMs;
    budgetMs = parent.budgetMs;
    if (parent.aborted) throw refusalFromParent(operation, expiresAtMs, parent.abortReason);
  }
  if (signal?.aborted) throw new DeadlineCancelledError(operation, signal.reason);

  const remaining = cutoffMono - nowMono;
  if (keptBack && remaining <= 0 && remaining + keepBeforeParentMs > 0) {
    // The parent is still running: only the reserve kept before it is left.
    throw new InsufficientBudgetError(operation, minUsefulMs + keepBeforeParentMs, remaining + keepBeforeParentMs);
  }
  if (remaining <= 0) throw new DeadlineExceededError(operation, expiresAtMs);
  if (remaining - reserveMs < minUsefulMs) throw new InsufficientBudgetError(operation, minUsefulMs + reserveMs, remaining);

  return new DeadlineNode({
    operation,
    cutoffMono,
    expiresAtMs,
    source: 'local',
    budgetMs: budgetMs > 0 ? budgetMs : 0,
    parent,
    signal,
  });
}

/** The parent `options` name, or the deadline active in OTel context when they name none. */
function parentFor(options: DeadlineOptions): Deadline | null | undefined {
  return options?.parent === undefined ? getDeadline() : options.parent;
}

/** True for the errors openDeadline throws to refuse work (not for bad arguments). */
export const isRefusal: (err: unknown) => boolean = isDeadlineError;

/** Runs `open`; a refusal it throws still gets a `not_started` span named `operation`, in `ctx`. */
export function withRefusalSpan<T>(operation: string, ctx: Context, open: () => T): T {
  try {
    return open();
  } catch (err) {
    if (isRefusal(err)) endRefusedSpan(trace.getTracer(TRACER_NAME).startSpan(operation, {}, ctx), err);
    throw err;
  }
}

/** Ends a span for work that was refused before it started. */
export function endRefusedSpan(span: Span, err: unknown): void {
  span.setAttribute(ATTR_DEADLINE_OUTCOME, 'not_started');
  span.setStatus({ code: SpanStatusCode.ERROR, message: abortCodeOf(err) });
  span.end();
}

/** A telemetry-safe name for a failure: the error's type, never its message (which may carry user data). */
export function errorType(err: unknown): string {
  return err instanceof Error ? err.name : typeof err;
}

/** Runs `fn` with `span` active on `ctx`, marks a failure, then ends the span and calls `settle`, whatever happened. */
export async function runInSpan<T>(span: Span, ctx: Context, fn: () => Promise<T> | T, settle: () => void): Promise<T> {
  try {
    return await context.with(trace.setSpan(ctx, span), fn);
  } catch (err) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: errorType(err) });
    throw err;
  } finally {
    span.end();
    settle();
  }
}

/**
 * Runs `fn` under a new deadline, active in OTel context, inside a span named `operation`; when `fn`
 * settles the span ends and the deadline is disposed. A refusal still ends a `not_started` span, then throws.
 */
export async function withDeadline<T>(options: DeadlineOptions, fn: (deadline: Deadline) => Promise<T> | T): Promise<T> {
  if (typeof fn !== 'function') throw new TypeError('fn must be a function');
  return withDeadlineKeeping(options, 0, fn);
}

/** @internal withDeadline ending `keepBeforeParentMs` before the active deadline (withAdmission). */
export async function withDeadlineKeeping<T>(options: DeadlineOptions, keepBeforeParentMs: number, fn: (deadline: Deadline) => Promise<T> | T): Promise<T> {
  checkContextManager();
  const outer = context.active();
  const deadline = withRefusalSpan(options.operation, outer, () => openDeadlineUnder(parentFor(options), options, keepBeforeParentMs));
  const inner = setDeadline(outer, deadline);
  return runInSpan(trace.getTracer(TRACER_NAME).startSpan(options.operation, {}, inner), inner, () => fn(deadline), () => deadline.dispose());
}
