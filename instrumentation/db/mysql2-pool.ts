import { context } from '@opentelemetry/api';
import { refusalFor } from '../call/budget';
import type { ClientHost } from '../call/host';
import { wrapMethod, type MethodPatch } from '../wrap';
import { statementDeadline } from './begin';
import { makeOpensOutsideDeadline } from './connection-context';
import { definerOf } from './definer';
import { deliver, isFunction } from './deliver';
import { PoolWait, type WaiterQueue } from './pool-wait';

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;
type Exports = Record<string, unknown>;
type Callback = (err: unknown, ...results: unknown[]) => void;

interface MysqlPool {
  _connectionQueue?: { toArray(): unknown[]; removeOne(index: number): unknown };
}

/**
 * The callbacks our getConnection wrapper gave the pool. mysql2 hands a
 * queued waiter to getConnection again when the connection it was to get is
 * destroyed (releaseConnection of a removed connection): that call runs in
 * whoever destroyed it, often another request under its own deadline. A
 * callback found here has been judged already, by its own caller's deadline
 * or none, and passes through (a connection it opens, opened outside any).
 */
const poolCallbacks = new WeakSet<object>();

function given<C extends object>(callback: C): C {
  poolCallbacks.add(callback);
  return callback;
}

/** Pool#getConnection of mysql2's Pool class (lib/pool.js; hooked as a file, like lib/connection.js). */
export function patchMysql2Pool(Pool: unknown, host: ClientHost, owner: object, isActive: () => boolean): MethodPatch[] {
  const pool = (Pool as { prototype?: Exports } | undefined)?.prototype;
  if (typeof Pool !== 'function' || pool === undefined) return [];
  const patch = wrapMethod(definerOf(pool, 'getConnection'), 'getConnection', owner, isActive, makeGetConnectionWrapper(host));
  return patch === undefined ? [] : [patch];
}

/**
 * Pool#getConnection. Its callback runs in the caller's context, deadline or
 * not: mysql2 calls a waiter back from wherever a connection came free, in
 * another request's context. A connection it opens is opened outside the
 * caller's deadline (connection-context.ts). Under an active deadline the wait
 * counts against the budget: at the cutoff the waiter leaves the pool's queue
 * with DeadlineExceededError, and a connection that arrives later is released.
 */
function makeGetConnectionWrapper(host: ClientHost) {
  return (original: AnyFunction): AnyFunction => {
    const opensOutsideDeadline = makeOpensOutsideDeadline(original);
    return function getConnection(this: unknown, ...args: unknown[]): unknown {
      const first = args[0];
      if (!isFunction(first) || !host.settings.mysql2) return original.apply(this, args);
      if (poolCallbacks.has(first)) return opensOutsideDeadline.apply(this, args);
      const ctx = context.active();
      const deadline = statementDeadline(host, 'mysql2', ctx);
      const callback = given(context.bind(ctx, first as Callback));
      if (deadline === undefined) return original.call(this, callback);
      if (host.settings.mode === 'observe') return opensOutsideDeadline.call(this, callback);
      const refusal = refusalFor(deadline, 'mysql2.getConnection', host.settings.minUsefulMs);
      if (refusal !== undefined) return void process.nextTick(deliver, callback, refusal);
      const wait = new PoolWait(deadline, 'mysql2.getConnection', CONNECTION_QUEUE, callback, (conn: { release(): void }) => conn.release());
      given(wait.answer);
      wait.start(this as MysqlPool, opensOutsideDeadline);
      return undefined;
    };
  };
}

/** mysql2's waiters: `_connectionQueue`, a Denque. */
const CONNECTION_QUEUE: WaiterQueue<MysqlPool> = {
  entries: (pool) => pool._connectionQueue?.toArray() ?? [],
  leave(pool, entry) {
    const queue = pool._connectionQueue;
    const index = queue === undefined ? -1 : queue.toArray().indexOf(entry);
    if (index >= 0) queue!.removeOne(index);
  },
};
