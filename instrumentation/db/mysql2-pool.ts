import { context } from '@opentelemetry/api';
import { refusalFor } from '../call/budget';
import type { ClientHost } from '../call/host';
import type { MethodPatch } from '../wrap';
import { type AnyFunction, deliver, isFunction, makeOpensOutsideDeadline, type NodeCallback, statementDeadline, wrapWhereDefined } from './driver-call';
import { PoolWait, type WaiterQueue } from './pool-wait';

interface MysqlPool {
  _connectionQueue?: { toArray(): unknown[]; removeOne(index: number): unknown };
}

/** The callbacks our getConnection gave the pool: mysql2 hands a waiter to getConnection again, inside whoever destroyed a connection; it passes through. */
const poolCallbacks = new WeakSet<object>();

function given<C extends object>(callback: C): C {
  poolCallbacks.add(callback);
  return callback;
}

/** Pool#getConnection (lib/pool.js, hooked as a file too): its callback runs in its caller's context, a connection it opens outside the deadline, and under a deadline the wait is bounded (PoolWait). */
export function patchMysql2Pool(Pool: unknown, host: ClientHost, _slot: unknown, owner: object, isActive: () => boolean): MethodPatch[] {
  return wrapWhereDefined(Pool, { getConnection: makeGetConnectionWrapper(host) }, owner, isActive);
}

function makeGetConnectionWrapper(host: ClientHost) {
  return (original: AnyFunction): AnyFunction => {
    const opensOutsideDeadline = makeOpensOutsideDeadline(original);
    return function getConnection(this: unknown, ...args: unknown[]): unknown {
      const first = args[0];
      if (!isFunction(first) || !host.settings.mysql2) return original.apply(this, args);
      if (poolCallbacks.has(first)) return opensOutsideDeadline.apply(this, args);
      const ctx = context.active();
      const deadline = statementDeadline(host, 'mysql2', ctx);
      const callback = given(context.bind(ctx, first as NodeCallback));
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
