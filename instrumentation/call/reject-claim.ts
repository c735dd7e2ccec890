import type { Deadline } from '../../src/deadline';
import { DeadlineExceededError, InsufficientBudgetError } from '../../src/errors';

/** An early refusal as a peer claims it (HTTP or gRPC), and the error a client raises when it believes one. */

/** What a well-formed early-reject body says. */
export type RejectClaim = { code: 'DEADLINE_EXCEEDED' } | { code: 'INSUFFICIENT_BUDGET'; neededMs: number; remainingMs: number };

/** True for a header value (node:http, undici `request`, fetch `Headers.get`) that is exactly `1`. */
export function isRejectValue(value: unknown): boolean {
  if (Array.isArray(value)) return value.length === 1 && isRejectValue(value[0]);
  return typeof value === 'string' && value.trim() === '1';
}

/** The error a client raises for an early-reject reply it believed. */
export function errorFromClaim(operation: string, deadline: Deadline, claim: RejectClaim): Error {
  if (claim.code === 'INSUFFICIENT_BUDGET') {
    return new InsufficientBudgetError(`${operation} (rejected by the server)`, claim.neededMs, claim.remainingMs);
  }
  return new DeadlineExceededError(`${operation} (rejected by the server)`, deadline.expiresAtMs);
}
