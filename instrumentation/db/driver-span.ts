import type { Span } from '@opentelemetry/api';
import { isOwnWrapper, isShimmerWrapper } from '../wrap';
import type { DbStatement, SpanShape } from './statement';
import { type AnyFunction } from './driver-call';

/** What `dispatching` holds while a call passes through us untouched: an inner hook's span is nobody's. */
const PASSING_THROUGH = Symbol('otel-deadline.passing-through');

/**
 * Hands a driver instrumentation's span to the statement it covers through its `requestHook`, in either registration
 * order: on top of us it calls the hook just before our wrapper (the span waits in `pending`, keyed by the command's
 * arguments or the query text); below us, while our statement is `dispatching`. Both happen in one synchronous call.
 */
export class DriverSpanSlot {
  private dispatching: DbStatement | typeof PASSING_THROUGH | undefined = undefined;
  private pending: Span | undefined = undefined;
  private pendingKey: unknown = undefined;

  constructor(private readonly isActive: () => boolean) {}

  readonly hook = (span: Span, key?: unknown): void => {
    const dispatching = this.dispatching;
    if (dispatching !== undefined) {
      if (dispatching !== PASSING_THROUGH) dispatching.adoptSpan(span);
      return;
    }
    if (!this.isActive()) return;
    this.pending = span;
    this.pendingKey = key;
  };

  /**
   * The span announced for the call entering our wrapper if its key is `key` or a prefix of it (sqlcommenter appends to
   * the text). Another call's span stays: instrumentation-pg sends `SET application_name` between its hook and its statement.
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

  /** Runs the driver's method with `statement` as the one inner hooks report to. */
  dispatch(statement: DbStatement | typeof PASSING_THROUGH, method: AnyFunction, self: unknown, args: unknown[]): unknown {
    const previous = this.dispatching;
    this.dispatching = statement;
    try {
      return method.apply(self, args);
    } finally {
      this.dispatching = previous;
    }
  }

  /** For a call we leave untouched: a span an inner instrumentation announces meanwhile is dropped. */
  passThrough(method: AnyFunction, self: unknown, args: unknown[]): unknown {
    return this.dispatch(PASSING_THROUGH, method, self, args);
  }
}

/**
 * Whether a statement needs a span of ours: no driver instrumentation announced one, none wraps the method on top of us,
 * and none below us makes one (a refused call never reaches it).
 */
export function needsOwnSpan(outerSpan: Span | undefined, original: unknown, current: unknown, owner: object, refused: boolean): boolean {
  return outerSpan === undefined && isOwnWrapper(current, owner) && (refused || !isShimmerWrapper(original));
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
