/**
 * Typed deadline errors with a stable `code` and a `Symbol.for` brand (`instanceof` works across package
 * copies); `status` and `expose` let web frameworks answer without a stack. None is an `AbortError`:
 * instrumentations treat that as a deliberate cancel.
 */

export type DeadlineErrorCode = 'DEADLINE_EXCEEDED' | 'INSUFFICIENT_BUDGET' | 'CANCELLED';

/** The HTTP status of a deadline that passed, or of a budget too small: 504 Gateway Timeout. */
export const DEADLINE_HTTP_STATUS = 504;
/** The HTTP status of work the caller cancelled: 499, "client closed request". */
export const CANCELLED_HTTP_STATUS = 499;

const BRANDS: Record<DeadlineErrorCode, symbol> = {
  DEADLINE_EXCEEDED: Symbol.for('otel-deadline.error.DEADLINE_EXCEEDED'),
  INSUFFICIENT_BUDGET: Symbol.for('otel-deadline.error.INSUFFICIENT_BUDGET'),
  CANCELLED: Symbol.for('otel-deadline.error.CANCELLED'),
};
/** Our three classes and their codes; a user's subclass is not in it. */
const OWN_CODES = new Map<object, DeadlineErrorCode>();

function brandOf(value: unknown): DeadlineErrorCode | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  return (Object.keys(BRANDS) as DeadlineErrorCode[]).find((code) => (value as Record<symbol, unknown>)[BRANDS[code]] === true);
}

function isoOrRaw(epochMs: number): string {
  const date = new Date(epochMs);
  return Number.isNaN(date.getTime()) ? String(epochMs) : date.toISOString();
}

type StatusOf<C extends DeadlineErrorCode> = C extends 'CANCELLED' ? typeof CANCELLED_HTTP_STATUS : typeof DEADLINE_HTTP_STATUS;

/** What the three errors share. Not exported from the package root: tell them apart by `code`. */
export abstract class BrandedDeadlineError<C extends DeadlineErrorCode> extends Error {
  readonly code: C;
  readonly status: StatusOf<C>;
  readonly statusCode: StatusOf<C>;
  readonly expose: true;
  readonly operation: string;

  constructor(code: C, name: string, operation: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = name;
    this.code = code;
    this.status = this.statusCode = (code === 'CANCELLED' ? CANCELLED_HTTP_STATUS : DEADLINE_HTTP_STATUS) as StatusOf<C>;
    this.expose = true;
    this.operation = operation;
    Object.defineProperty(this, BRANDS[code], { value: true });
  }

  /** Our own classes check the brand (other copies count); a user's subclass the prototype. */
  static override [Symbol.hasInstance](value: unknown): boolean {
    const code = OWN_CODES.get(this);
    if (code === undefined) return Function.prototype[Symbol.hasInstance].call(this, value);
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRANDS[code]] === true;
  }
}

export class DeadlineExceededError extends BrandedDeadlineError<'DEADLINE_EXCEEDED'> {
  constructor(operation: string, readonly expiresAtMs: number, options?: { cause?: unknown }) {
    super('DEADLINE_EXCEEDED', 'DeadlineExceededError', operation, `deadline of "${operation}" passed at ${isoOrRaw(expiresAtMs)}`, options);
  }
}

export class InsufficientBudgetError extends BrandedDeadlineError<'INSUFFICIENT_BUDGET'> {
  constructor(operation: string, readonly neededMs: number, readonly remainingMs: number, options?: { cause?: unknown }) {
    const message = `"${operation}" needs ${Math.ceil(neededMs)} ms but only ${Math.floor(remainingMs)} ms of its deadline are usable`;
    super('INSUFFICIENT_BUDGET', 'InsufficientBudgetError', operation, message, options);
  }
}

export class DeadlineCancelledError extends BrandedDeadlineError<'CANCELLED'> {
  /** `cause` is the cancellation reason exactly as the canceller gave it. */
  constructor(operation: string, cause: unknown) {
    super('CANCELLED', 'DeadlineCancelledError', operation, `"${operation}" was cancelled`, { cause });
  }
}

OWN_CODES.set(DeadlineExceededError, 'DEADLINE_EXCEEDED').set(InsufficientBudgetError, 'INSUFFICIENT_BUDGET').set(DeadlineCancelledError, 'CANCELLED');

/** True for every deadline error of this package, from any copy of it. Tell them apart by `err.code`. */
export function isDeadlineError(err: unknown): err is DeadlineExceededError | InsufficientBudgetError | DeadlineCancelledError {
  return brandOf(err) !== undefined;
}

/** The stable code of an abort reason: ours map to their `code`; any other reason counts as a cancellation. */
export function abortCodeOf(reason: unknown): DeadlineErrorCode {
  return brandOf(reason) ?? 'CANCELLED';
}

/** A telemetry-safe description of an abort reason: ours verbatim, a foreign one by type name and `code`. */
export function describeAbortReason(reason: unknown): string {
  if (isDeadlineError(reason)) return reason.message;
  if (reason instanceof Error) {
    const code = (reason as { code?: unknown }).code;
    return typeof code === 'string' && /^[A-Za-z0-9_.-]{1,64}$/.test(code) ? `${reason.name} (${code})` : reason.name;
  }
  return reason === undefined ? 'aborted' : typeof reason;
}

/** @internal The error for work an abort stopped: DeadlineCancelledError or DeadlineExceededError, keeping `cause`. */
export function errorForAbort(reason: unknown, operation: string, expiresAtMs: number, cause: unknown = reason): DeadlineCancelledError | DeadlineExceededError {
  return abortCodeOf(reason) === 'CANCELLED'
    ? new DeadlineCancelledError(operation, cause)
    : new DeadlineExceededError(operation, expiresAtMs, { cause });
}
