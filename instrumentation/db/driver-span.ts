import type { Span } from '@opentelemetry/api';
import { isOwnWrapper, isShimmerWrapper } from '../wrap';
import type { DbStatement, SpanShape } from './statement';

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;

/** What `dispatching` holds while a call passes through us untouched: an inner hook's span is nobody's. */
const PASSING_THROUGH = Symbol('otel-deadline.passing-through');

/**
 * Hands the span of a driver instrumentation (instrumentation-pg, -ioredis)
 * to the statement it covers, through that instrumentation's `requestHook`,
 * whatever the registration order:
 * - registered after us, it wraps on top and calls the hook just before it
 *   calls our wrapper: the span waits in `pending` for that call, known by a
 *   key both see (ioredis: the command's argument array; pg: the query text);
 * - registered before us, its wrapper runs inside ours and calls the hook
 *   while our statement is `dispatching`, or while the call passes through.
 * Both are synchronous steps of one driver call, so one slot per driver is
 * enough. The hook reads no context: our wrapper's own read decides whether
 * the call is guarded, so a call with no deadline costs that one read.
 */
export class DriverSpanSlot {
  private dispatching: DbStatement | typeof PASSING_THROUGH | undefined = undefined;
  private pending: Span | undefined = undefined;
  /** The key `pending` was announced with; undefined when the caller of the hook gave none. */
  private pendingKey: unknown = undefined;

  constructor(private readonly isActive: () => boolean) {}

  /** The `requestHook` to give the driver instrumentation, with the key of the call it announces. */
  readonly hook = (span: Span, key?: unknown): void => {
    const dispatching = this.dispatching;
    if (dispatching !== undefined) {
      if (dispatching !== PASSING_THROUGH) dispatching.adoptSpan(span);
      return;
    }
    // Disabled, our wrappers pass every call through without taking it.
    if (!this.isActive()) return;
    this.pending = span;
    this.pendingKey = key;
  };

  /**
   * The span an outer instrumentation announced for the call now entering our
   * wrapper, if its key is `key`: the same array, the same string, or one
   * that starts with it (instrumentation-pg's sqlcommenter option appends a
   * comment to the text after the hook). A span announced for another call
   * stays: instrumentation-pg sends its own `SET application_name` through
   * us between its hook and the statement the span is for.
   */
  take(key: unknown): Span | undefined {
    const span = this.pending;
    if (span === undefined) return undefined;
    const announced = this.pendingKey;
    if (announced !== undefined && key !== announced && !(typeof key === 'string' && typeof announced === 'string' && key.startsWith(announced))) return undefined;
    this.pending = undefined;
    this.pendingKey = undefined;
    return span;
  }

  /** Runs the driver's method (`method.apply(self, args)`) with `statement` as the one inner hooks report to. */
  dispatch(statement: DbStatement, method: AnyFunction, self: unknown, args: unknown[]): unknown {
    return this.runWith(statement, method, self, args);
  }

  /**
   * Runs the driver's method for a call we leave untouched, when a driver
   * instrumentation below us may call its hook from inside: that span is
   * dropped, not left to be taken by the next guarded call.
   */
  passThrough(method: AnyFunction, self: unknown, args: unknown[]): unknown {
    return this.runWith(PASSING_THROUGH, method, self, args);
  }

  private runWith(dispatching: DbStatement | typeof PASSING_THROUGH, method: AnyFunction, self: unknown, args: unknown[]): unknown {
    const previous = this.dispatching;
    this.dispatching = dispatching;
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

/** The span name and attributes the OTel driver instrumentations give a statement; never its text. */
export function dbSpanShape(name: string, system: string, operation: string | undefined, database: unknown, host: unknown, port: unknown): SpanShape {
  const attributes: Record<string, string | number> = { 'db.system.name': system };
  if (typeof database === 'string') attributes['db.namespace'] = database;
  if (typeof host === 'string') attributes['server.address'] = host;
  if (typeof port === 'number') attributes['server.port'] = port;
  if (operation !== undefined) attributes['db.operation.name'] = operation;
  return { name, attributes };
}
