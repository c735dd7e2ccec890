/** Pure deadline arithmetic on the monotonic clock, so wall-clock jumps cannot change a budget. */

/** setTimeout's ceiling. Node fires larger delays after ~1 ms, so never pass one through. */
const MAX_TIMER_DELAY_MS = 2 ** 31 - 1;

/** The longest deadline accepted: 100 days. Longer is a mistake, refused with a RangeError; wire values are clamped. */
export const MAX_DEADLINE_MS = 100 * 24 * 60 * 60 * 1000;

/** The monotonic clock, in milliseconds: the global `performance` at each read, so fake timers installed before a deadline opens govern it. */
export function monotonicNow(): number {
  return performance.now();
}

/** The earlier of two cutoffs; a child is always the min of its own and its parent's. */
export function minCutoff(a: number, b: number): number {
  return a < b ? a : b;
}

export function remainingUntil(cutoffMono: number): number {
  const left = cutoffMono - monotonicNow();
  return left > 0 ? left : 0;
}

/** A timer delay that is safe to hand to setTimeout; longer waits are re-armed in steps. */
export function safeTimerDelay(remainingMs: number): number {
  if (remainingMs <= 0) return 0;
  return remainingMs > MAX_TIMER_DELAY_MS ? MAX_TIMER_DELAY_MS : Math.ceil(remainingMs);
}

/** A finite, non-negative number; `what` names the unit in the type error. */
function checkNonNegative(name: string, value: unknown, what: string): number {
  if (typeof value !== 'number') throw new TypeError(`${name} must be ${what}, got ${value === null ? 'null' : typeof value}`);
  if (Number.isNaN(value)) throw new RangeError(`${name} must not be NaN`);
  if (!Number.isFinite(value)) throw new RangeError(`${name} must be finite, got ${value}`);
  if (value < 0) throw new RangeError(`${name} must not be negative, got ${value}`);
  return value;
}

export function checkDuration(name: string, value: unknown): number {
  return checkNonNegative(name, value, 'a number');
}

export function checkEpoch(name: string, value: unknown): number {
  return checkNonNegative(name, value, 'a number of epoch milliseconds');
}

/** A budget: a duration no longer than MAX_DEADLINE_MS. */
export function checkBudget(name: string, value: unknown): number {
  const ms = checkDuration(name, value);
  if (ms > MAX_DEADLINE_MS) throw new RangeError(`${name} must be at most ${MAX_DEADLINE_MS} ms (100 days), got ${ms}`);
  return ms;
}
