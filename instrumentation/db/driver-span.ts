import { context, type Span } from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';
import { getDeadline } from '../../src/context';
import type { Deadline } from '../../src/deadline';
import { isOwnWrapper, isShimmerWrapper } from '../wrap';
import type { DbStatement } from './statement';

/**
 * Hands the span of a driver instrumentation (instrumentation-pg, -mysql2,
 * -ioredis) to the statement it covers, through that instrumentation's
 * `requestHook`, whatever the registration order:
 * - registered after us, it wraps on top and calls the hook just before it
 *   calls our wrapper: the span waits in `pending` for the next statement;
 * - registered before us, its wrapper runs inside ours and calls the hook
 *   while our statement is `dispatching`.
 * Both are synchronous steps of one driver call, so one slot per driver is enough.
 * A span announced outside a statement of ours while no deadline is active
 * (or tracing is suppressed) is ignored: our wrapper will not guard that call,
 * and when the driver instrumentation runs below us the span would otherwise
 * wait in `pending` and be taken by the next guarded call.
 */
export class DriverSpanSlot {
  private dispatching: DbStatement | undefined = undefined;
  private pending: Span | undefined = undefined;
  /** The deadline active when `pending` was announced. */
  private pendingDeadline: Deadline | undefined = undefined;

  /** The `requestHook` to give the driver instrumentation. */
  readonly hook = (span: Span): void => {
    if (this.dispatching !== undefined) return this.dispatching.adoptSpan(span);
    const ctx = context.active();
    const deadline = getDeadline(ctx);
    if (deadline === undefined || isTracingSuppressed(ctx)) return;
    this.pending = span;
    this.pendingDeadline = deadline;
  };

  /**
   * The deadline that was active when the span `take` is about to return was
   * announced, if one is waiting: the one the call now entering our wrapper
   * runs under, since the outer instrumentation calls its hook and then our
   * wrapper in one synchronous step without changing the context. It saves
   * that wrapper a context read of its own (about 460 instructions on Node 20).
   * Read it before `take`, which forgets both.
   */
  announcedDeadline(): Deadline | undefined {
    return this.pending === undefined ? undefined : this.pendingDeadline;
  }

  /** The span an outer instrumentation announced for the call now entering our wrapper. */
  take(): Span | undefined {
    const span = this.pending;
    this.pending = undefined;
    this.pendingDeadline = undefined;
    return span;
  }

  /** Runs the driver's method (`method.apply(self, args)`) with `statement` as the one inner hooks report to. */
  dispatch(statement: DbStatement, method: (this: unknown, ...args: unknown[]) => unknown, self: unknown, args: unknown[]): unknown {
    const previous = this.dispatching;
    this.dispatching = statement;
    try {
      return method.apply(self, args);
    } finally {
      this.dispatching = previous;
    }
  }
}

/**
 * True when another instrumentation wraps this driver method, below us
 * (`original` is a shimmer wrapper) or on top of us (the method found on the
 * object is not our wrapper): it makes the span, we must not make a second.
 */
export function driverInstrumented(original: unknown, current: unknown, owner: object): boolean {
  return isShimmerWrapper(original) || !isOwnWrapper(current, owner);
}
