import { context } from '@opentelemetry/api';
import { getDeadline, withoutDeadline } from '../../src/context';

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;

/**
 * Wraps a driver method that opens a connection (pg Client#connect, ioredis Redis#connect, mysql2 createConnection and
 * getConnection) to run in the caller's context minus its deadline. A socket runs its events in the context it was
 * created in for as long as it lives: otherwise every later event (ioredis's handshake and offline-queue flush, other
 * requests' callbacks and the statements they make) would be judged by the opener's deadline. The spans stay.
 */
export function makeOpensOutsideDeadline(original: AnyFunction): AnyFunction {
  return function opensConnection(this: unknown, ...args: unknown[]): unknown {
    const ctx = context.active();
    if (getDeadline(ctx) === undefined) return original.apply(this, args);
    return context.with(withoutDeadline(ctx), () => original.apply(this, args));
  };
}
