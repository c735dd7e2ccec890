import { context } from '@opentelemetry/api';
import type { Deadline } from '../../src/deadline';
import { refusalFor } from '../call/budget';
import type { ClientHost } from '../call/host';
import { wrapMethod, type MethodPatch } from '../wrap';
import { statementDeadline } from './begin';
import { makeOpensOutsideDeadline } from './connection-context';
import { definerOf } from './definer';
import { deliver, isFunction } from './deliver';
import { PoolWait } from './pool-wait';

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;
type Exports = Record<string, unknown>;
type Callback = (err: unknown, ...results: unknown[]) => void;

interface MysqlPool {
  _connectionQueue?: { length: number; peekAt(index: number): unknown; toArray(): unknown[]; removeOne(index: number): unknown };
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
 * another request's context. A connection it opens is
 * opened outside the caller's deadline (connection-context.ts). Under an
 * active deadline the wait counts against the budget: at the cutoff the
 * waiter leaves the pool's queue with DeadlineExceededError, and a
 * connection that arrives for it later is released.
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
      if (deadline === undefined) {
        args[0] = given(context.bind(ctx, first as Callback));
        return original.apply(this, args);
      }
      const callback = context.bind(ctx, first as Callback);
      if (host.settings.mode === 'observe') return opensOutsideDeadline.call(this, given(callback));
      const refusal = refusalFor(deadline, 'mysql2.getConnection', host.settings.minUsefulMs);
      if (refusal !== undefined) return void process.nextTick(deliver, callback, refusal);
      const wait = new MysqlPoolWait(deadline, callback);
      wait.start(this as MysqlPool, opensOutsideDeadline, given(wait.onConnection));
      return undefined;
    };
  };
}

/** One Pool#getConnection waiting for a connection: leaves mysql2's queue at the cutoff. */
class MysqlPoolWait extends PoolWait<MysqlPool> {
  constructor(
    deadline: Deadline,
    private readonly callback: Callback,
  ) {
    super(deadline, 'mysql2.getConnection');
  }

  /** What the pool calls back: the connection goes to the caller, or back to the pool if the caller left. */
  readonly onConnection = (err: unknown, conn?: { release(): void }): void => {
    if (this.claim()) return deliver(this.callback, err, conn);
    if ((err === null || err === undefined) && conn !== undefined) conn.release();
  };

  protected queueLength(pool: MysqlPool): number {
    return pool._connectionQueue?.length ?? 0;
  }

  protected lastQueued(pool: MysqlPool): unknown {
    const queue = pool._connectionQueue;
    return queue === undefined ? undefined : queue.peekAt(queue.length - 1);
  }

  protected leaveQueue(pool: MysqlPool): void {
    const queue = pool._connectionQueue;
    const index = queue === undefined ? -1 : queue.toArray().indexOf(this.waiter);
    if (index >= 0) queue!.removeOne(index);
  }

  protected fail(error: Error): void {
    deliver(this.callback, error);
  }
}
