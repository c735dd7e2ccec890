/**
 * Typed deadline errors. Each carries a stable `code` and a brand registered
 * with `Symbol.for`, so `instanceof` and `isDeadlineError` agree even when two
 * copies of this package are loaded (one via `require`, one via `import`, or
 * two versions in node_modules).
 *
 * Each also carries an HTTP status as `status` and `statusCode` (504 for a
 * deadline that passed or a budget too small; 499, "client closed request",
 * for a cancel by the caller) and `expose: true` (the message holds only
 * operation names and times), which is what express, koa and fastify read
 * when a handler throws one: they answer that status without a stack.
 *
 * None of these is called `AbortError`: OpenTelemetry instrumentations treat
 * an AbortError as a deliberate cancel rather than a failure, and an expiry
 * must count as a failure.
 */

const EXCEEDED_BRAND = Symbol.for('otel-deadline.error.DEADLINE_EXCEEDED');
const INSUFFICIENT_BRAND = Symbol.for('otel-deadline.error.INSUFFICIENT_BUDGET');
const CANCELLED_BRAND = Symbol.for('otel-deadline.error.CANCELLED');

function hasBrand(value: unknown, brand: symbol): boolean {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[brand] === true;
}

/**
 * `instanceof` for a branded class: the brand for the class itself (so an
 * error from another copy of the package counts), the ordinary prototype
 * check for a user's subclass (so a plain error of ours is not one of theirs).
 */
function isInstance(cls: object, own: object, value: unknown, brand: symbol): boolean {
  if (cls !== own) return Function.prototype[Symbol.hasInstance].call(cls, value);
  return hasBrand(value, brand);
}

function isoOrRaw(epochMs: number): string {
  const date = new Date(epochMs);
  return Number.isNaN(date.getTime()) ? String(epochMs) : date.toISOString();
}

/** The HTTP status of a deadline that passed, or of a budget too small: 504 Gateway Timeout. */
export const DEADLINE_HTTP_STATUS = 504;
/** The HTTP status of work the caller cancelled: 499, "client closed request". */
export const CANCELLED_HTTP_STATUS = 499;

export class DeadlineExceededError extends Error {
  readonly code = 'DEADLINE_EXCEEDED' as const;
  readonly status = DEADLINE_HTTP_STATUS;
  readonly statusCode = DEADLINE_HTTP_STATUS;
  readonly expose = true;
  readonly operation: string;
  readonly expiresAtMs: number;

  constructor(operation: string, expiresAtMs: number, options?: { cause?: unknown }) {
    super(`deadline of "${operation}" passed at ${isoOrRaw(expiresAtMs)}`, options);
    this.name = 'DeadlineExceededError';
    this.operation = operation;
    this.expiresAtMs = expiresAtMs;
    Object.defineProperty(this, EXCEEDED_BRAND, { value: true });
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    return isInstance(this, DeadlineExceededError, value, EXCEEDED_BRAND);
  }
}

export class InsufficientBudgetError extends Error {
  readonly code = 'INSUFFICIENT_BUDGET' as const;
  readonly status = DEADLINE_HTTP_STATUS;
  readonly statusCode = DEADLINE_HTTP_STATUS;
  readonly expose = true;
  readonly operation: string;
  readonly neededMs: number;
  readonly remainingMs: number;

  constructor(operation: string, neededMs: number, remainingMs: number, options?: { cause?: unknown }) {
    super(
      `"${operation}" needs ${Math.ceil(neededMs)} ms but only ${Math.floor(remainingMs)} ms of its deadline are usable`,
      options,
    );
    this.name = 'InsufficientBudgetError';
    this.operation = operation;
    this.neededMs = neededMs;
    this.remainingMs = remainingMs;
    Object.defineProperty(this, INSUFFICIENT_BRAND, { value: true });
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    return isInstance(this, InsufficientBudgetError, value, INSUFFICIENT_BRAND);
  }
}

export class DeadlineCancelledError extends Error {
  readonly code = 'CANCELLED' as const;
  readonly status = CANCELLED_HTTP_STATUS;
  readonly statusCode = CANCELLED_HTTP_STATUS;
  readonly expose = true;
  readonly operation: string;

  /** `cause` is the cancellation reason exactly as the canceller gave it. */
  constructor(operation: string, cause: unknown) {
    super(`"${operation}" was cancelled`, { cause });
    this.name = 'DeadlineCancelledError';
    this.operation = operation;
    Object.defineProperty(this, CANCELLED_BRAND, { value: true });
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    return isInstance(this, DeadlineCancelledError, value, CANCELLED_BRAND);
  }
}

/**
 * True for every error this package raises about a deadline, one per
 * `DeadlineErrorCode`: DeadlineExceededError, InsufficientBudgetError and
 * DeadlineCancelledError, from any copy of the package. Tell a budget
 * problem from a cancel by `err.code`.
 */
export function isDeadlineError(err: unknown): err is DeadlineExceededError | InsufficientBudgetError | DeadlineCancelledError {
  return hasBrand(err, EXCEEDED_BRAND) || hasBrand(err, INSUFFICIENT_BRAND) || hasBrand(err, CANCELLED_BRAND);
}

export type DeadlineErrorCode = 'DEADLINE_EXCEEDED' | 'INSUFFICIENT_BUDGET' | 'CANCELLED';

/**
 * The stable code of an abort reason: ours map to their `code`; anything else a
 * caller aborted with counts as a cancellation.
 */
export function abortCodeOf(reason: unknown): DeadlineErrorCode {
  if (hasBrand(reason, EXCEEDED_BRAND)) return 'DEADLINE_EXCEEDED';
  if (hasBrand(reason, INSUFFICIENT_BRAND)) return 'INSUFFICIENT_BUDGET';
  return 'CANCELLED';
}

/**
 * A telemetry-safe description of an abort reason. Our own messages hold only
 * operation names and timestamps; a foreign reason may carry anything, so only
 * its type name (and a string `code`, if any) is kept.
 */
export function describeAbortReason(reason: unknown): string {
  if (hasBrand(reason, EXCEEDED_BRAND) || hasBrand(reason, INSUFFICIENT_BRAND) || hasBrand(reason, CANCELLED_BRAND)) {
    return (reason as Error).message;
  }
  if (reason instanceof Error) {
    const code = (reason as { code?: unknown }).code;
    return typeof code === 'string' && /^[A-Za-z0-9_.-]{1,64}$/.test(code) ? `${reason.name} (${code})` : reason.name;
  }
  return reason === undefined ? 'aborted' : typeof reason;
}

/**
 * @internal The error a caller gets for work a deadline's abort stopped:
 * DeadlineCancelledError when `reason` is a cancellation, else
 * DeadlineExceededError; `cause` (the reason unless given, e.g. a driver's
 * own error) is kept as its cause.
 */
export function errorForAbort(reason: unknown, operation: string, expiresAtMs: number, cause: unknown = reason): DeadlineCancelledError | DeadlineExceededError {
  return abortCodeOf(reason) === 'CANCELLED'
    ? new DeadlineCancelledError(operation, cause)
    : new DeadlineExceededError(operation, expiresAtMs, { cause });
}
