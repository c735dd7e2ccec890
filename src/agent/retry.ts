import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { context, SpanStatusCode, trace, type Span } from '@opentelemetry/api';
import { getDeadline, setDeadline } from '../context';
import type { Deadline, ManagedDeadline } from '../deadline';
import { abortCodeOf, DeadlineCancelledError, DeadlineExceededError, describeAbortReason, InsufficientBudgetError } from '../errors';
import { checkOperation, checkSignal, endRefusedSpan, errorType, isRefusal, openDeadlineUnder, TRACER_NAME } from '../open';
import { checkContextManager } from '../context-check';
import { checkDuration } from '../time';
import { ATTR_DEADLINE_ABORT_CODE, ATTR_DEADLINE_ABORT_REASON, ATTR_DEADLINE_OUTCOME, ATTR_DEADLINE_REMAINING_MS } from '../attributes';
import { RetryEvent, type RetryDecision } from './attributes';
import { carriesDeadlineExpired, deadlineCodeOf, httpStatusOf } from './replies';

/** What each attempt receives. */
export interface RetryAttempt {
  /** 1 for the first call, 2 for the first retry, and so on. */
  attempt: number;
  /** Aborts `reserveMs` before the caller's cutoff, or when the caller cancels. Pass it on. */
  signal: AbortSignal;
  /** Milliseconds this attempt may use (up to the reserve); Infinity without a deadline. */
  remainingMs: number;
  /** The same for every attempt of one call: send it so the server can drop duplicates. */
  idempotencyKey: string;
}

/** The wait before attempt n (n ≥ 2): a fixed value, a list indexed from the first retry (last value repeats), or a function of n. */
export type BackoffSchedule = number | readonly number[] | ((attempt: number) => number);

export interface RetryOptions {
  /** Span name and the operation named in errors. Default `retry`. */
  operation?: string;
  /** Total attempts, the first call included. Default 3. */
  attempts?: number;
  /** Default 100. */
  backoffMs?: BackoffSchedule;
  /** Fraction in [0, 1] of each wait that is randomised downwards; a wait never exceeds its schedule. Default 0. */
  jitter?: number;
  /** Don't start an attempt with less usable time than this. Default 0. */
  minAttemptMs?: number;
  /** Time kept back for the caller after the last attempt; attempts are aborted that early. Default 0. */
  reserveMs?: number;
  /** A cap on each attempt, clamped under the shared deadline; hitting it (alone) is a retryable failure. Default: none. */
  attemptTimeoutMs?: number;
  /** Whether a failed attempt is worth repeating; deadline errors and `x-deadline-expired` always stop. Default: `defaultRetryable`. */
  retryable?: (err: unknown) => boolean;
  /** Default: a random UUID per call. */
  idempotencyKey?: string;
  /** An extra cancellation source. */
  signal?: AbortSignal;
  /** The deadline all attempts share. Default: the one active in OTel context; `null` for none. */
  deadline?: Deadline | null;
}

/** The default `retryable`: every error but a 4xx other than 408, 425 and 429. */
export function defaultRetryable(err: unknown): boolean {
  const status = httpStatusOf(err);
  if (status === undefined || status < 400 || status >= 500) return true;
  return status === 408 || status === 425 || status === 429;
}

function checkPlan(options: RetryOptions) {
  if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
  const operation = checkOperation(options.operation ?? 'retry');
  const attempts = options.attempts ?? 3;
  if (!Number.isInteger(attempts) || attempts < 1) throw new RangeError(`attempts must be an integer ≥ 1, got ${String(attempts)}`);
  const jitter = options.jitter ?? 0;
  if (typeof jitter !== 'number' || !(jitter >= 0 && jitter <= 1)) throw new RangeError(`jitter must be in [0, 1], got ${String(jitter)}`);
  const retryable = options.retryable ?? defaultRetryable;
  if (typeof retryable !== 'function') throw new TypeError('retryable must be a function');
  const idempotencyKey = options.idempotencyKey ?? randomUUID();
  if (typeof idempotencyKey !== 'string' || idempotencyKey.length === 0) throw new TypeError('idempotencyKey must be a non-empty string');
  const schedule = options.backoffMs ?? 100;
  if (Array.isArray(schedule)) {
    if (schedule.length === 0) throw new RangeError('backoffMs must not be an empty list');
    schedule.forEach((value, i) => checkDuration(`backoffMs[${i}]`, value));
  } else if (typeof schedule !== 'function') checkDuration('backoffMs', schedule);
  const base = (attempt: number): number =>
    typeof schedule === 'function' ? schedule(attempt) : Array.isArray(schedule) ? schedule[Math.min(attempt - 2, schedule.length - 1)] : (schedule as number);
  return {
    operation,
    attempts,
    backoffFor: (attempt: number) => checkDuration(`backoffMs(${attempt})`, base(attempt)) * (1 - jitter * Math.random()),
    minAttemptMs: options.minAttemptMs === undefined ? 0 : checkDuration('minAttemptMs', options.minAttemptMs),
    reserveMs: options.reserveMs === undefined ? 0 : checkDuration('reserveMs', options.reserveMs),
    attemptTimeoutMs: options.attemptTimeoutMs === undefined ? undefined : checkDuration('attemptTimeoutMs', options.attemptTimeoutMs),
    retryable,
    idempotencyKey,
  };
}

/** A refusal as the retry loop reports it: deadline errors name the retry's operation. */
function stopForAbort(operation: string, reason: unknown, cause: unknown): Error {
  if (reason instanceof DeadlineExceededError) {
    return new DeadlineExceededError(operation, reason.expiresAtMs, { cause: cause ?? reason });
  }
  if (reason instanceof InsufficientBudgetError || reason instanceof DeadlineCancelledError) return reason;
  return new DeadlineCancelledError(operation, reason);
}

/** `deadline_exceeded`, `insufficient_budget` or `cancelled`, from the error's deadline code. */
function decisionOf(code: string): RetryDecision {
  return code.toLowerCase() as RetryDecision;
}

function safeRetryable(retryable: (err: unknown) => boolean, err: unknown): boolean {
  try {
    return retryable(err) === true;
  } catch {
    return false;
  }
}

/**
 * Calls `fn` until it succeeds, every attempt inside the caller's one deadline. Before each wait and
 * attempt, if the time left cannot cover the wait, `minAttemptMs` and `reserveMs`, it throws
 * InsufficientBudgetError (cause: the last error). Runs in a span named `operation`, with a
 * `deadline.retry.attempt` event per attempt saying why the loop went on or stopped.
 */
export async function retryWithinDeadline<T>(
  fn: (attempt: RetryAttempt) => Promise<T> | T,
  options: RetryOptions = {},
): Promise<T> {
  if (typeof fn !== 'function') throw new TypeError('fn must be a function');
  checkContextManager();
  const plan = checkPlan(options);
  const parent = options.deadline === undefined ? getDeadline() : (options.deadline ?? undefined);
  checkSignal(options.signal);

  const outer = context.active();
  const span = trace.getTracer(TRACER_NAME).startSpan(plan.operation, {}, outer);
  let lastError: unknown;
  const record = (attempt: number, started: boolean, backoffMs: number, decision: RetryDecision, err?: unknown) => {
    span.addEvent(RetryEvent.NAME, {
      [RetryEvent.ATTEMPT]: attempt,
      [RetryEvent.STARTED]: started,
      [RetryEvent.BACKOFF_MS]: Math.round(backoffMs),
      [RetryEvent.DECISION]: decision,
      ...(parent === undefined ? {} : { [ATTR_DEADLINE_REMAINING_MS]: Math.floor(parent.remainingMs()) }),
      ...(err === undefined ? {} : { [RetryEvent.ERROR]: describeAbortReason(err) }),
    });
  };
  /** With a refusal: records that the attempt did not start, and throws it. */
  const stopIfRefused = (attempt: number, backoffMs: number, refusal: Error | undefined): void => {
    if (refusal === undefined) return;
    record(attempt, false, backoffMs, decisionOf(abortCodeOf(refusal)), lastError);
    throw refusal;
  };
  // The budget check that runs before every wait and attempt.
  const refusal = (backoffMs: number): Error | undefined => {
    if (options.signal?.aborted) return new DeadlineCancelledError(plan.operation, options.signal.reason);
    if (parent === undefined) return undefined;
    if (parent.aborted) return stopForAbort(plan.operation, parent.abortReason, lastError);
    const remaining = parent.remainingMs();
    const usable = remaining - backoffMs - plan.reserveMs;
    if (usable > 0 && usable >= plan.minAttemptMs) return undefined;
    return new InsufficientBudgetError(plan.operation, backoffMs + plan.minAttemptMs + plan.reserveMs, remaining, { cause: lastError });
  };

  const first = refusal(0);
  if (first !== undefined) {
    record(1, false, 0, decisionOf(abortCodeOf(first)));
    endRefusedSpan(span, first);
    throw first;
  }

  // One scope for the whole call, ending `reserveMs` before the caller's cutoff.
  const scope: ManagedDeadline | undefined =
    parent === undefined
      ? undefined
      : openDeadlineUnder(parent, { operation: plan.operation, timeoutMs: parent.remainingMs(), signal: options.signal }, plan.reserveMs);
  const signal = scope?.signal ?? options.signal ?? new AbortController().signal;
  const inner = scope === undefined ? trace.setSpan(outer, span) : setDeadline(trace.setSpan(outer, span), scope);

  try {
    for (let attempt = 1; ; attempt++) {
      const backoffMs = attempt === 1 ? 0 : plan.backoffFor(attempt);
      if (attempt > 1) stopIfRefused(attempt, backoffMs, refusal(backoffMs));
      if (backoffMs > 0) {
        await sleep(backoffMs, undefined, { signal }).catch(() => stopIfRefused(attempt, backoffMs, stopForAbort(plan.operation, signal.reason, lastError)));
        // A late timer (a busy event loop) may have eaten into minAttemptMs.
        stopIfRefused(attempt, backoffMs, refusal(0));
      }

      // With attemptTimeoutMs each attempt runs under its own, shorter child.
      const own =
        plan.attemptTimeoutMs === undefined
          ? undefined
          : openDeadlineUnder(scope ?? null, { operation: plan.operation, timeoutMs: plan.attemptTimeoutMs, signal: scope === undefined ? signal : undefined });
      try {
        const info: RetryAttempt = {
          attempt,
          signal: own?.signal ?? signal,
          remainingMs: (own ?? scope)?.remainingMs() ?? Infinity,
          idempotencyKey: plan.idempotencyKey,
        };
        const value = await context.with(own === undefined ? inner : setDeadline(inner, own), () => fn(info));
        record(attempt, true, backoffMs, 'succeeded');
        return value;
      } catch (err) {
        lastError = err;
        let decision: RetryDecision;
        let thrown: unknown = err;
        const code = deadlineCodeOf(err);
        if (signal.aborted) {
          // The shared deadline (less the reserve) or the caller's cancellation ended it.
          thrown = isRefusal(err) ? err : stopForAbort(plan.operation, signal.reason, err);
          decision = decisionOf(abortCodeOf(thrown));
        } else if (own?.aborted) {
          // Only this attempt's own cap: the shared budget decides at the next check.
          decision = attempt >= plan.attempts ? 'attempts_exhausted' : 'retry';
        } else if (code !== undefined) decision = decisionOf(code);
        else if (carriesDeadlineExpired(err)) decision = 'deadline_expired_reply';
        else if (!safeRetryable(plan.retryable, err)) decision = 'not_retryable';
        else if (attempt >= plan.attempts) decision = 'attempts_exhausted';
        else decision = 'retry';
        record(attempt, true, backoffMs, decision, err);
        if (decision !== 'retry') throw thrown;
      } finally {
        own?.dispose();
      }
    }
  } catch (err) {
    markFailure(span, err);
    throw err;
  } finally {
    span.end();
    scope?.dispose();
  }
}

function markFailure(span: Span, err: unknown): void {
  const code = isRefusal(err) ? abortCodeOf(err) : undefined;
  span.setStatus({ code: SpanStatusCode.ERROR, message: code ?? errorType(err) });
  if (code === undefined) return;
  // Attempts ran, so the call did start: it ran out of budget or was cancelled.
  span.setAttribute(ATTR_DEADLINE_OUTCOME, code === 'CANCELLED' ? 'cancelled' : 'expired');
  span.setAttribute(ATTR_DEADLINE_ABORT_CODE, code);
  span.setAttribute(ATTR_DEADLINE_ABORT_REASON, describeAbortReason(err));
}
