import { context, type Context } from '@opentelemetry/api';
import type { Deadline } from '../../src/deadline';
import { refusalFor } from '../call/budget';
import type { ClientHost } from '../call/host';
import { type AnyFunction, callbackOrPromise, deliver, isFunction, statementDeadline } from './driver-call';
import { pgSpanShape, PG_OPERATION } from './pg-query';
import { withGuardedRelease, type PgClient, type PgConnectCallback } from './pg-connection';
import { isSqlWrite, sqlCommand } from './sql';
import { DbStatement } from './statement';
import { PoolWait, type WaiterQueue } from './pool-wait';

interface PgPool {
  ending?: unknown;
  Promise?: PromiseConstructor;
  options?: { host?: string; port?: number; database?: string };
  idleCount?: number;
  waitingCount?: number;
  _pendingQueue?: { timedOut?: boolean }[];
}

/** pg-pool's waiters: `_pendingQueue`, and the `timedOut` flag its own connectionTimeoutMillis sets on one that left. */
const PENDING: WaiterQueue<PgPool> = {
  entries: (pool) => pool._pendingQueue ?? [],
  leave(pool, entry) {
    const queue = pool._pendingQueue ?? [];
    const index = queue.indexOf(entry as { timedOut?: boolean });
    if (index < 0) return;
    queue.splice(index, 1);
    (entry as { timedOut?: boolean }).timedOut = true;
  },
};

/** The caller of the Pool#query now running (its context and text): the Pool#connect it makes learns from here whose statement it waits for. */
let poolQueryContext: Context | undefined;
let poolQueryText: unknown;

/** Pool#query: pg-pool's own, with its caller's context and text known to the Pool#connect it makes. */
export function makePgPoolQueryWrapper(original: AnyFunction): AnyFunction {
  return function query(this: unknown, ...args: unknown[]): unknown {
    const text = args[0];
    poolQueryContext = context.active();
    poolQueryText = typeof text === 'object' && text !== null ? (text as { text?: unknown }).text : text;
    try {
      return original.apply(this, args);
    } finally {
      poolQueryContext = undefined;
      poolQueryText = undefined;
    }
  };
}

/** Pool#connect: a guarded release (pg-connection.ts), the callback in its caller's context, the wait bounded (PoolWait). */
export function makePgPoolConnectWrapper(host: ClientHost) {
  return (original: AnyFunction): AnyFunction =>
    function connect(this: unknown, ...args: unknown[]): unknown {
      const given = isFunction(args[0]) ? (args[0] as PgConnectCallback) : undefined;
      const queryContext = given === undefined ? undefined : poolQueryContext;
      const text = poolQueryText;
      poolQueryContext = undefined;
      poolQueryText = undefined;
      if (!host.settings.pg) return original.apply(this, args);
      const ctx = queryContext ?? context.active();
      const deadline = statementDeadline(host, 'pg', ctx);
      const pool = this as PgPool;
      const [settle, promise] = callbackOrPromise(given, pool.Promise);
      const callback = withGuardedRelease(settle as PgConnectCallback, ctx);
      if (deadline === undefined || host.settings.mode === 'observe' || pool.ending === true) {
        original.call(this, callback);
        return promise;
      }
      const refusal = refusalFor(deadline, queryContext === undefined ? 'pg.pool.connect' : PG_OPERATION, host.settings.minUsefulMs);
      if (refusal !== undefined) {
        // For pg-pool's query, the statement's own span says it never reached a client.
        if (queryContext !== undefined) recordUnsent(host, ctx, deadline, pool, text, refusal, true);
        process.nextTick(deliver, callback, refusal);
        return promise;
      }
      // More idle connections than waiters: pg-pool hands this caller one on its next tick, before any I/O or timer can take it.
      if ((pool.idleCount ?? 0) > (pool.waitingCount ?? 0)) original.call(this, callback);
      else {
        const unsent = queryContext === undefined ? undefined : (error: Error) => recordUnsent(host, ctx, deadline, pool, text, error, false);
        new PoolWait(deadline, 'pg.pool.connect', PENDING, callback, releaseUnwanted, unsent).start(pool, original);
      }
      return promise;
    };
}

/** A connection that came after its waiter left goes back to the pool. */
function releaseUnwanted(_client: never, [release]: never[]): void {
  (release as (() => void) | undefined)?.();
}

/** A Pool#query refused up front, or whose wait for a connection ended at the cutoff, never reached a client (nor instrumentation-pg). */
function recordUnsent(host: ClientHost, ctx: Context, deadline: Deadline, pool: PgPool, text: unknown, error: Error, refused: boolean): void {
  const command = sqlCommand(text);
  const statement = new DbStatement(deadline, false, PG_OPERATION, isSqlWrite(command));
  statement.startOwnSpan(host.tracer, ctx, pgSpanShape({ connectionParameters: pool.options } as PgClient, command));
  if (refused) return statement.refuse(error);
  statement.reason = error.cause ?? error;
  statement.settle(error, undefined, false);
}
