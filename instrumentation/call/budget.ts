import type { Deadline } from '../../src/deadline';
import { DeadlineNode } from '../../src/deadline-node';
import { DeadlineExceededError, errorForAbort, InsufficientBudgetError } from '../../src/errors';

/** The milliseconds left under `deadline`, or -1 once it has aborted: one clock read to refuse, arm and clamp from. */
export function budgetLeft(deadline: Deadline): number {
  if (deadline instanceof DeadlineNode) return deadline.leftBeforeAbort();
  return deadline.aborted ? -1 : deadline.remainingMs();
}

/** Whether a call with `left` ms left (from budgetLeft) may start: exactly when refusalAt has no refusal (NaN included). */
export function mayStart(left: number, minUsefulMs: number): boolean {
  return !(left <= 0 || left < minUsefulMs);
}

/** Why a call with `left` ms left (from budgetLeft) must not start, or undefined if it may. */
export function refusalAt(deadline: Deadline, left: number, operation: string, minUsefulMs: number): Error | undefined {
  if (left < 0) return errorForAbort(deadline.abortReason, operation, deadline.expiresAtMs);
  if (left === 0) return new DeadlineExceededError(operation, deadline.expiresAtMs);
  if (left < minUsefulMs) return new InsufficientBudgetError(operation, minUsefulMs, left);
  return undefined;
}

/** Why a call must not start under `deadline`, or undefined if it may. */
export function refusalFor(deadline: Deadline, operation: string, minUsefulMs: number): Error | undefined {
  return refusalAt(deadline, budgetLeft(deadline), operation, minUsefulMs);
}
