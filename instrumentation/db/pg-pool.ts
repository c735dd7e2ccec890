import { context, type Context } from '@opentelemetry/api';
import type { Deadline } from '../../src/deadline';
import { budgetLeft, mayStart, refusalAt, refusalFor } from '../call/budget';
import type { ClientHost } from '../call/host';
import { statementDeadline } from './begin';
import { callbackOrPromise, deliver, isFunction, type NodeCallback } from './deliver';
import { pgSpanShape, PG_OPERATION } from './pg-query';
import { isPgCancel, withGuardedRelease, type PgClient, type PgConnectCallback } from './pg-connection';
import { isSqlWrite, sqlCommand } from './sql';
import { DbStatement } from './statement';
import { DeadlineCancelledError, DeadlineExceededError } from '../../src/errors';
import { PoolWait } from './pool-wait';

interface PgPool {
  ending?: unknown;
  Promise?: PromiseConstructor;
  options?: { host?: string; port?: number; database?: string };
  _pendingQueue?: { timedOut?: boolean }[];
  connect: (callback?: PgConnectCallback) => unknown;
}

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;

const POOL_OPERATION = 'pg.pool.connect';

/**
 * The connect callback of our own Pool#query while it calls `pool.connect`:
 * that call, in the same synchronous step, has been admitted already and runs
 * its query in its caller's context itself.
 */
let internalConnect: PgConnectCallback | undefined;

/**
 * The context of the pg-pool `query` our Pool#query passes through, while it
 * runs. pg-pool's query calls Pool#connect at once, and that callback makes
 * the statement; pg-pool calls a waiter back from another request's release,
 * so without this the statement would run in that request's context.
 */
let poolQueryCaller: Context | undefined;

/** Marks errors a pool wait ended with, so Pool#query can tell them from the driver's. */
const POOL_WAIT_ERRORS = new WeakSet<object>();

/** One Pool#connect waiting for a connection: leaves pg-pool's queue at the cutoff. */
class PgPoolWait extends PoolWait<PgPool> {
  constructor(
    deadline: Deadline,
    private readonly callback: PgConnectCallback,
  ) {
    super(deadline, POOL_OPERATION);
  }

  /** What pg-pool calls back: the connection goes to the caller, or back to the pool if the caller left. */
  readonly onConnected = (err: unknown, client?: PgClient, release?: (err?: unknown) => void): void => {
    if (this.claim()) return deliver(this.callback, err, client, release);
    // Its caller left at the cutoff: the connection goes back to the pool unused.
    if (err === undefined || err === null) release?.();
  };

  protected queueLength(pool: PgPool): number {
    return pool._pendingQueue?.length ?? 0;
  }

  protected lastQueued(pool: PgPool): unknown {
    return pool._pendingQueue?.at(-1);
  }

  protected leaveQueue(pool: PgPool): void {
    const queue = pool._pendingQueue;
    const waiter = this.waiter as { timedOut?: boolean };
    const index = queue === undefined ? -1 : queue.indexOf(waiter);
    if (index < 0) return;
    queue!.splice(index, 1);
    waiter.timedOut = true;
  }

  protected fail(error: Error): void {
    POOL_WAIT_ERRORS.add(error);
    deliver(this.callback, error);
  }
}

/**
 * Pool#connect under an active deadline: the wait for a connection counts
 * against the budget. At the cutoff the waiter leaves pg-pool's queue and gets
 * DeadlineExceededError; a connection still being opened for it goes back to
 * the pool when it arrives, never to a caller that is gone.
 */
export function makePgPoolConnectWrapper(host: ClientHost) {
  return (original: AnyFunction): AnyFunction =>
    function connect(this: unknown, ...args: unknown[]): unknown {
      const given = isFunction(args[0]) ? (args[0] as PgConnectCallback) : undefined;
      const internal = given !== undefined && given === internalConnect;
      internalConnect = undefined;
      const forPoolQuery = poolQueryCaller;
      poolQueryCaller = undefined;
      if (!host.settings.pg) return original.apply(this, args);
      if (forPoolQuery !== undefined && given !== undefined) {
        // pg-pool's own query, passed through by our Pool#query: its callback makes the statement at once.
        args[0] = withGuardedRelease(context.bind(forPoolQuery, given));
        return original.apply(this, args);
      }
      const ctx = context.active();
      const deadline = statementDeadline(host, 'pg', ctx);
      const pool = this as PgPool;
      // Our own Pool#query sets its context itself; a caller's callback runs in the caller's context.
      const [settle, promise] = callbackOrPromise(given === undefined || internal ? given : context.bind(ctx, given), pool.Promise);
      // Every checkout: a statement may be cut on it under a deadline its caller sets after connecting.
      const callback = withGuardedRelease(settle as PgConnectCallback);
      if (deadline === undefined || host.settings.mode === 'observe' || pool.ending === true) {
        // pg-pool calls a waiter back from another request's release: the caller's callback runs in the caller's context.
        original.call(this, callback);
        return promise;
      }
      // Our own Pool#query was admitted a moment ago, in this same synchronous step.
      const refusal = internal ? undefined : refusalFor(deadline, POOL_OPERATION, host.settings.minUsefulMs);
      if (refusal !== undefined) {
        process.nextTick(deliver, callback, refusal);
        return promise;
      }
      const wait = new PgPoolWait(deadline, callback);
      wait.start(pool, original, wait.onConnected);
      return promise;
    };
}

/** Whether the client that ran a statement is fit to go back to the pool. */
function keepsConnection(err: unknown): boolean {
  if (err === undefined || err === null) return true;
  // A statement the server confirmed it cancelled leaves the connection ready for the next one.
  return (err instanceof DeadlineExceededError || err instanceof DeadlineCancelledError) && isPgCancel(err.cause);
}

/**
 * Pool#query under an active deadline. pg-pool's own version releases the
 * client with the query's error, which removes it from the pool; here a
 * statement the server confirmed it cancelled gives its connection back
 * (the same steps otherwise: connect, query, release, 'error' listener).
 */
export function makePgPoolQueryWrapper(host: ClientHost) {
  return (original: AnyFunction): AnyFunction =>
    function query(this: unknown, ...args: unknown[]): unknown {
      const ctx = context.active();
      const deadline = statementDeadline(host, 'pg', ctx);
      if (deadline === undefined || host.settings.mode === 'observe' || isFunction(args[0])) {
        // The Pool#connect pg-pool's query calls at once learns whose statement it waits for from here.
        poolQueryCaller = ctx;
        try {
          return original.apply(this, args);
        } finally {
          poolQueryCaller = undefined;
        }
      }
      const pool = this as PgPool;
      const [text] = args;
      let values = args[1];
      let given = args[2];
      if (isFunction(values)) {
        given = values;
        values = undefined;
      }
      const [callback, promise] = callbackOrPromise(given, pool.Promise);
      const left = budgetLeft(deadline);
      const minUsefulMs = host.settings.minUsefulMs;
      if (!mayStart(left, minUsefulMs)) {
        const refusal = refusalAt(deadline, left, PG_OPERATION, minUsefulMs)!;
        recordUnsent(host, ctx, deadline, pool, text, refusal, true);
        process.nextTick(deliver, callback, refusal);
        return promise;
      }
      const onConnect: PgConnectCallback = (err, client) => {
        if (err !== undefined && err !== null) {
          if (typeof err === 'object' && POOL_WAIT_ERRORS.has(err)) recordUnsent(host, ctx, deadline, pool, text, err as Error, false);
          return deliver(callback, err);
        }
        runOnClient(ctx, client!, text, values, callback);
      };
      internalConnect = onConnect;
      try {
        pool.connect(onConnect);
      } finally {
        internalConnect = undefined;
      }
      return promise;
    };
}

function runOnClient(ctx: Context, client: PgClient, text: unknown, values: unknown, callback: NodeCallback): void {
  let released = false;
  const onError = (err: unknown) => {
    if (released) return;
    released = true;
    client.release?.(err);
    deliver(callback, err);
  };
  client.once('error', onError);
  try {
    // In the caller's context: the pool may hand over the client from another request's release.
    context.with(ctx, () =>
      client.query(text, values, (err: unknown, res: unknown) => {
        client.removeListener('error', onError);
        if (released) return;
        released = true;
        client.release?.(keepsConnection(err) ? undefined : err);
        deliver(callback, err, res);
      }),
    );
  } catch (err) {
    client.removeListener('error', onError);
    released = true;
    client.release?.(err);
    deliver(callback, err);
  }
}

/**
 * A Pool#query refused up front, or whose wait for a connection ended at the
 * cutoff, never reached a client (nor instrumentation-pg): our span says so.
 */
function recordUnsent(host: ClientHost, ctx: Context, deadline: Deadline, pool: PgPool, text: unknown, error: Error, refused: boolean): void {
  const command = sqlCommand(typeof text === 'string' ? text : (text as { text?: unknown } | null)?.text);
  const statement = new DbStatement(deadline, false, PG_OPERATION, isSqlWrite(command));
  statement.startOwnSpan(host.tracer, ctx, pgSpanShape({ connectionParameters: pool.options } as PgClient, command));
  if (refused) return statement.refuse(error);
  statement.reason = error.cause ?? error;
  statement.settle(error, undefined, false);
}
