import { context } from '@opentelemetry/api';
import { getDeadline } from '../context';
import type { Deadline } from '../deadline';
import { DeadlineCancelledError, DeadlineExceededError, InsufficientBudgetError } from '../errors';
import { checkOperation, withDeadlineKeeping, withRefusalSpan } from '../open';
import { checkDuration } from '../time';

export interface AdmitOptions {
  /** Time kept back for serializing the answer; it is not usable by the work being admitted. Default 0. */
  reserveMs?: number;
  /** The operation named in the refusal. Default: the deadline's own operation. */
  operation?: string;
  /** Default: the deadline active in OTel context; `null` for none. */
  deadline?: Deadline | null;
}

/**
 * Admission control: the usable ms (remaining − `reserveMs`; Infinity without a deadline), or throws
 * DeadlineExceededError, DeadlineCancelledError or InsufficientBudgetError before any work starts.
 */
export function admit(minUsefulMs: number, options: AdmitOptions = {}): number {
  checkDuration('minUsefulMs', minUsefulMs);
  if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
  const reserveMs = options.reserveMs === undefined ? 0 : checkDuration('reserveMs', options.reserveMs);
  const deadline = options.deadline === undefined ? getDeadline() : (options.deadline ?? undefined);
  if (deadline === undefined) return Infinity;
  const operation = options.operation ?? deadline.operation;
  if (deadline.aborted) {
    const reason = deadline.abortReason;
    if (reason instanceof DeadlineExceededError) {
      throw new DeadlineExceededError(operation, deadline.expiresAtMs, { cause: reason });
    }
    throw reason instanceof DeadlineCancelledError ? reason : new DeadlineCancelledError(operation, reason);
  }
  const remaining = deadline.remainingMs();
  if (remaining <= 0) throw new DeadlineExceededError(operation, deadline.expiresAtMs);
  const usable = remaining - reserveMs;
  if (usable <= 0 || usable < minUsefulMs) throw new InsufficientBudgetError(operation, minUsefulMs + reserveMs, remaining);
  return usable;
}

export interface AdmissionOptions {
  operation: string;
  /** Refuse unless at least this much is usable after the reserve. */
  minUsefulMs: number;
  /** Kept back for the caller: the admitted work's deadline ends this long before the caller's. Default 0. */
  reserveMs?: number;
  /** An own, shorter cap for the work. Required when no deadline is active. */
  timeoutMs?: number;
}

/**
 * Runs optional work only if it fits: `admit`, then `withDeadline` under a child ending `reserveMs`
 * before the caller's cutoff (or sooner, with `timeoutMs`). A refusal ends a `not_started` span and throws.
 */
export async function withAdmission<T>(options: AdmissionOptions, fn: (deadline: Deadline) => Promise<T> | T): Promise<T> {
  if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
  if (typeof fn !== 'function') throw new TypeError('fn must be a function');
  const { operation, minUsefulMs, reserveMs } = options;
  checkOperation(operation);
  const timeoutMs = options.timeoutMs === undefined ? undefined : checkDuration('timeoutMs', options.timeoutMs);
  const usable = withRefusalSpan(operation, context.active(), () => admit(minUsefulMs, { reserveMs, operation }));
  const cap = Math.min(usable, timeoutMs ?? Infinity);
  if (cap === Infinity) throw new TypeError('withAdmission needs an active deadline or a timeoutMs');
  // The reserve comes off the cutoff at opening, not off `usable`: a pause between reads would eat into it.
  return withDeadlineKeeping({ operation, timeoutMs: cap }, reserveMs ?? 0, fn);
}
