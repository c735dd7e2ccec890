import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import { suppressTracing } from '@opentelemetry/core';
import { wrapMethod, type MethodPatch } from '../wrap';
import { definerOf } from './definer';

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;
type Exports = Record<string, unknown>;

/** SERVER_STATUS_IN_TRANS: the bit of an OK packet's status flags that says a transaction is open. */
const SERVER_STATUS_IN_TRANS = 1;

interface SessionConnection {
  query(sql: string, callback: (err: unknown, result?: unknown) => void): unknown;
  destroy(): void;
}

/**
 * Connections on which a deadline refused, skipped or cut a statement: the
 * transaction the caller may have had open on them is in a state nobody
 * knows (a statement KILL QUERY stops is rolled back alone, the transaction
 * stays open with what came before). A pool connection in this set is rolled
 * back before it goes back to its pool, or destroyed.
 */
const unsure = new WeakSet<object>();
/** Pool connections whose release waits for that rollback: a second release() meanwhile is the same one. */
const releasing = new WeakSet<object>();

export function markTransactionUnknown(connection: object): void {
  unsure.add(connection);
}

/** True when the server's own report (the status flags of the OK packet `result` came in) says no transaction is open. */
export function reportsNoTransaction(result: unknown): boolean {
  const status = (result as { serverStatus?: unknown } | null | undefined)?.serverStatus;
  return typeof status === 'number' && (status & SERVER_STATUS_IN_TRANS) === 0;
}

/**
 * Sends `ROLLBACK` on `connection` and calls `done(true)` when the server's
 * answer says no transaction is left open, `done(false)` otherwise (an error,
 * or a status that still shows one). ROLLBACK is never refused or cut, so it
 * goes through the connection's public `query` like any other statement.
 */
export function rollBack(connection: SessionConnection, done: (clean: boolean) => void): void {
  connection.query('ROLLBACK', (err, result) => done((err === null || err === undefined) && reportsNoTransaction(result)));
}

/**
 * PoolConnection#release (lib/pool_connection.js; `mysql2/promise`'s
 * release() and the pool's own `query` / `execute` call it). A connection a
 * deadline left in an unknown transaction state goes back to its pool only
 * once a ROLLBACK has answered that no transaction is open; otherwise it is
 * destroyed, and the pool opens a new one for its next waiter.
 */
export function patchMysql2PoolConnection(PoolConnection: unknown, owner: object, isActive: () => boolean): MethodPatch[] {
  const proto = (PoolConnection as { prototype?: Exports } | undefined)?.prototype;
  if (typeof PoolConnection !== 'function' || proto === undefined) return [];
  const patch = wrapMethod(definerOf(proto, 'release'), 'release', owner, isActive, makeReleaseWrapper);
  return patch === undefined ? [] : [patch];
}

function makeReleaseWrapper(original: AnyFunction): AnyFunction {
  return function release(this: unknown, ...args: unknown[]): unknown {
    const connection = this as SessionConnection;
    if (releasing.has(connection)) return undefined;
    if (!unsure.has(connection)) return original.apply(connection, args);
    unsure.delete(connection);
    releasing.add(connection);
    // Our own bookkeeping, made wherever release() was called: judged by no deadline, traced under no request.
    context.with(suppressTracing(ROOT_CONTEXT), () =>
      rollBack(connection, (clean) => {
        releasing.delete(connection);
        if (clean) original.apply(connection, args);
        else connection.destroy();
      }),
    );
    return undefined;
  };
}
