import { context } from '@opentelemetry/api';
import { getDeadline, withoutDeadline } from '../../src/context';

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;

/**
 * A wrapper for the driver method that opens a connection (pg's
 * Client#connect, ioredis's Redis#connect, mysql2's createConnection and its
 * pool's getConnection): the original runs in the caller's context minus its
 * deadline.
 *
 * Why: a socket runs its events in the async context it was created in, for
 * as long as it lives. A connection opened by the first request that needed
 * it (a lazily connected ioredis client, a pool's new client) would run every
 * later event under that request's deadline: ioredis's handshake (INFO,
 * HELLO) and its offline-queue flush, the callbacks of every later request's
 * statements, and any statement such a callback makes. Each would be refused
 * or cut at a cutoff that is not its own. The connection outlives the
 * request, so it does not carry its deadline; the caller's spans stay, so
 * the trace is unchanged. What the caller waits for is still bounded: a
 * statement queued until the connection is ready is cut at its own cutoff.
 */
export function makeOpensOutsideDeadline(original: AnyFunction): AnyFunction {
  return function opensConnection(this: unknown, ...args: unknown[]): unknown {
    const ctx = context.active();
    if (getDeadline(ctx) === undefined) return original.apply(this, args);
    return context.with(withoutDeadline(ctx), () => original.apply(this, args));
  };
}
