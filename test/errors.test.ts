import { describe, expect, it } from 'vitest';
import { DeadlineCancelledError, DeadlineExceededError, InsufficientBudgetError, isDeadlineError } from '../src';

/** The error classes' contract (issue 12 §8): isDeadlineError and instanceof say what they are. */

const exceeded = new DeadlineExceededError('op', 0);
const budget = new InsufficientBudgetError('op', 10, 5);
const cancelled = new DeadlineCancelledError('op', 'why');

describe('isDeadlineError', () => {
  const rows: [string, unknown, boolean][] = [
    ['DeadlineExceededError', exceeded, true],
    ['InsufficientBudgetError', budget, true],
    ['DeadlineCancelledError: CANCELLED is a DeadlineErrorCode too', cancelled, true],
    ['a copy from another package copy (brand only)', Object.defineProperty(new Error('x'), Symbol.for('otel-deadline.error.CANCELLED'), { value: true }), true],
    ['a plain Error with code CANCELLED', Object.assign(new Error('x'), { code: 'CANCELLED' }), false],
    ['an AbortError', new DOMException('aborted', 'AbortError'), false],
    ['null', null, false],
  ];
  it.each(rows)('%s: %s', (_name, value, expected) => {
    expect(isDeadlineError(value)).toBe(expected);
  });
});

describe('instanceof', () => {
  class TimeoutForCheckout extends DeadlineExceededError {}
  class NotEnoughTime extends InsufficientBudgetError {}
  class UserCancelled extends DeadlineCancelledError {}

  it('keeps the brand check for our classes, across copies', () => {
    const foreign = Object.defineProperty(new Error('x'), Symbol.for('otel-deadline.error.DEADLINE_EXCEEDED'), { value: true });
    expect(foreign).toBeInstanceOf(DeadlineExceededError);
    expect(exceeded).not.toBeInstanceOf(InsufficientBudgetError);
    expect(new Error('x')).not.toBeInstanceOf(DeadlineExceededError);
  });

  it('a subclass instance is an instance of our class and of its own', () => {
    const mine = new TimeoutForCheckout('op', 0);
    expect(mine).toBeInstanceOf(DeadlineExceededError);
    expect(mine).toBeInstanceOf(TimeoutForCheckout);
    expect(isDeadlineError(mine)).toBe(true);
  });

  it.each([
    ['DeadlineExceededError', exceeded, TimeoutForCheckout],
    ['InsufficientBudgetError', budget, NotEnoughTime],
    ['DeadlineCancelledError', cancelled, UserCancelled],
  ] as const)('a plain %s is not an instance of a user subclass', (_name, plain, Subclass) => {
    expect(plain instanceof Subclass).toBe(false);
  });
});
