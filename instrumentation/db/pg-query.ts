import { context, type Context, type Span } from '@opentelemetry/api';
import type { Deadline } from '../../src/deadline';
import { refusalFor } from '../call/budget';
import type { ClientHost } from '../call/host';
import { type AnyFunction, callbackOrPromise, deliver, isFunction, statementDeadline } from './driver-call';
import { CancelMachine, type CancelResult } from './cancel-machine';
import { dbSpanShape, needsOwnSpan, type DriverSpanSlot } from './driver-span';
import { activeQueryOf, CancelBarrier, destroyPgConnection, isPgCancel, sendPgCancel, sessionOf, type PgClient, type PgCut, type PgQuery } from './pg-connection';
import { holdsSeveralStatements, sqlCommand, sqlRole } from './sql';
import { DbStatement, type SpanShape } from './statement';

export const PG_OPERATION = 'pg.query';

/** instrumentation-pg's span name and connection attributes (`pg.query:SELECT test`); never the SQL text. */
export function pgSpanShape(client: PgClient, command: string | undefined): SpanShape {
  const params = client.connectionParameters ?? {};
  const database = params.database;
  const name = `${PG_OPERATION}:${command ?? 'unknown'}${typeof database === 'string' ? ` ${database}` : ''}`;
  return dbSpanShape(name, 'postgresql', command, database, params.host, params.port);
}

/** A text with several statements may have changed data before the part that was cancelled. */
class PgStatement extends DbStatement {
  holdsSeveral(): boolean {
    return holdsSeveralStatements(this.subject, 'postgres');
  }

  protected override isWrite(): boolean {
    return this.holdsSeveral() || super.isWrite();
  }
}

/** Gives a refused or cut query its error without anything being sent, the way pg fails a query itself. */
function failSubmittable(query: PgQuery, error: Error, connection: unknown): void {
  // A stream (pg-query-stream) reports through 'error' only once destroyed; a cursor through handleError.
  if (isFunction(query.destroy) && query.readable !== undefined) query.destroy(error);
  else query.handleError?.(error, connection);
}

/** Client#query under an active deadline: refused, or sent and guarded until its result is delivered. */
export function makePgQueryWrapper(host: ClientHost, slot: DriverSpanSlot, owner: object) {
  return (original: AnyFunction): AnyFunction =>
    function query(this: unknown, ...args: unknown[]): unknown {
      const text = queryTextOf(args[0]);
      const outerSpan = slot.take(text);
      const ctx = context.active();
      const deadline = statementDeadline(host, 'pg', ctx);
      const role = deadline === undefined || args[0] === null || args[0] === undefined ? undefined : sqlRole(text, 'postgres');
      // A statement that ends a transaction without committing or puts session state back is never refused or cut.
      if (role === undefined || role === 'cleanup') return slot.passThrough(original, this, args);
      return guardedQuery(host, slot, owner, original, this as PgClient, args, text, deadline!, ctx, outerSpan, role === 'commit');
    };
}

function queryTextOf(config: unknown): unknown {
  return typeof config === 'string' ? config : typeof config === 'object' && config !== null ? (config as { text?: unknown }).text : undefined;
}

/** `(text, cb)`, `(text, values, cb)` or a config object's `callback`. */
function callbackOf(args: unknown[]): ((...a: never[]) => unknown) | undefined {
  if (isFunction(args[1])) return args[1];
  if (isFunction(args[2])) return args[2];
  const fromConfig = (args[0] as { callback?: unknown }).callback;
  return isFunction(fromConfig) ? fromConfig : undefined;
}

/** Refuses the call the way pg fails one, after `before` (for a COMMIT: a ROLLBACK below our wrapper, so nothing of it commits later). */
function refuse(client: PgClient, args: unknown[], submittable: PgQuery | undefined, error: Error, before: (then: () => void) => void): unknown {
  if (submittable !== undefined) {
    before(() => failSubmittable(submittable, error, client.connection));
    return submittable;
  }
  const callback = callbackOf(args);
  if (callback !== undefined) return void before(() => deliver(callback, error));
  return new (client._Promise ?? Promise)((_resolve, reject) => before(() => reject(error)));
}

function rollBackFirst(slot: DriverSpanSlot, original: AnyFunction, client: PgClient) {
  return (then: () => void): void => {
    try {
      slot.passThrough(original, client, ['ROLLBACK', () => then()]);
    } catch {
      process.nextTick(then);
    }
  };
}

function guardedQuery(
  host: ClientHost, slot: DriverSpanSlot, owner: object, original: AnyFunction, client: PgClient,
  args: unknown[], text: unknown, deadline: Deadline, ctx: Context, outerSpan: Span | undefined, commits: boolean,
): unknown {
  const config = args[0] as PgQuery | string;
  const submittable = typeof config === 'object' && isFunction(config.submit) ? config : undefined;
  const observe = host.settings.mode === 'observe';
  const statement = new PgStatement(deadline, observe, PG_OPERATION, undefined, text);
  if (outerSpan !== undefined) statement.adoptSpan(outerSpan);
  const refusal = refusalFor(deadline, PG_OPERATION, host.settings.minUsefulMs);
  if (needsOwnSpan(outerSpan, original, client.query, owner, refusal !== undefined)) {
    statement.startOwnSpan(host.tracer, ctx, pgSpanShape(client, sqlCommand(text)));
  }
  if (refusal !== undefined) {
    if (!observe) {
      statement.refuse(refusal);
      // The caller's transaction (if any) is no longer what it left: a pool checks it at release.
      sessionOf(client).touched = true;
      return refuse(client, args, submittable, refusal, commits ? rollBackFirst(slot, original, client) : (then) => process.nextTick(then));
    }
    statement.markWouldReject();
  }
  // An admitted COMMIT is not cut: a cancel cannot undo a commit under way, only leave its outcome unknown.
  return new GuardedPgQuery(client, statement, submittable, !commits).run(slot, original, args);
}

/** One query between dispatch and delivery: finds it in pg's queues at the cutoff, cancels it, delivers once. */
class GuardedPgQuery extends CancelMachine {
  private query: PgQuery | undefined;
  private userCallback: ((err: unknown, result?: unknown) => void) | undefined;
  private cut: PgCut | undefined = undefined;
  private barrier: CancelBarrier | undefined = undefined;
  private ended = false;
  /** The caller's early error: a submittable's end of statement must not turn it into an `end`. */
  private earlyError: Error | undefined;

  constructor(
    private readonly client: PgClient,
    protected override readonly statement: PgStatement,
    private readonly submittable: PgQuery | undefined,
    private readonly cuttable: boolean,
  ) {
    super(statement);
  }

  protected holdsSeveral(): boolean {
    return this.statement.holdsSeveral();
  }

  run(slot: DriverSpanSlot, original: AnyFunction, args: unknown[]): unknown {
    const { client } = this;
    let callArgs = args;
    let promise: Promise<unknown> | undefined;
    if (this.submittable === undefined) {
      [this.userCallback, promise] = callbackOrPromise(callbackOf(args), client._Promise);
      callArgs = [args[0], isFunction(args[1]) ? undefined : args[1], this.onResult];
    } else {
      this.watchSubmittable(this.submittable);
    }
    const queuedBefore = client._queryQueue?.length ?? 0;
    const activeBefore = activeQueryOf(client);
    const result = slot.dispatch(this.statement, original, client, callArgs);
    this.query = this.submittable ?? this.locate(queuedBefore, activeBefore);
    if (this.submittable === undefined) this.settleFirst(this.query, 'callback');
    if (this.cuttable) this.statement.armFor(this);
    return promise ?? result;
  }

  /** The Query pg made for this call: the newest in its queue, or the one it started. */
  private locate(queuedBefore: number, activeBefore: PgQuery | null | undefined): PgQuery | undefined {
    const queue = this.client._queryQueue;
    if (queue !== undefined && queue.length > queuedBefore) return queue[queue.length - 1];
    const active = activeQueryOf(this.client);
    return active !== activeBefore && active !== null ? active : undefined;
  }

  onCutoff(): void {
    const { client, query } = this;
    // The caller's transaction (if any) is no longer what it left: a pool checks it at release.
    sessionOf(client).touched = true;
    const queue = client._queryQueue;
    const index = query === undefined || queue === undefined ? -1 : queue.indexOf(query);
    if (index >= 0) {
      // Not sent yet: it leaves pg's queue, never sent; pg's own error path ends a driver instrumentation's span.
      queue!.splice(index, 1);
      this.deliverEarly(undefined, false);
      if (this.submittable === undefined) query!.handleError?.(this.earlyError, client.connection);
      return;
    }
    if (query === undefined || query !== activeQueryOf(client) || client.pipeline === true) {
      // pg no longer runs it (its result is on the way) or we cannot tell which statement the backend runs.
      if (query !== undefined) this.openCut(false);
      return this.deliverEarly('not_told');
    }
    const cursorState = ((query as { cursor?: PgQuery }).cursor ?? query).state;
    // A cursor suspended between reads runs nothing on the server: closing its portal is all it takes.
    if (this.submittable !== undefined && cursorState === 'idle') return this.deliverEarly(undefined);
    // The cancel stops whatever the backend runs when it lands: nothing queued may start before it has settled.
    this.openCut(true);
    this.startCancel();
  }

  protected sendCancel(done: (result: CancelResult) => void): void {
    // A custom stream: we cannot reach the server ourselves.
    if (this.client.connectionParameters?.stream !== undefined) return done('not_told');
    sendPgCancel(this.client, done);
  }

  protected afterCancel(result: CancelResult): void {
    if (result === 'unsettled') destroyPgConnection(this.client);
    else this.barrier?.release();
    this.cut?.cancelEnd();
  }

  /** The connection serves nobody else until the statement has ended and its cancel (if pending) settled: a barrier first in pg's queue tells when; in pipeline mode, its end. */
  private openCut(cancelPending: boolean): void {
    const cut = sessionOf(this.client).openCut(cancelPending);
    this.cut = cut;
    if (this.client.pipeline !== true && Array.isArray(this.client._queryQueue)) {
      this.barrier = new CancelBarrier(cut, !cancelPending);
      this.client._queryQueue.unshift(this.barrier);
    } else if (this.ended) cut.statementEnd();
  }

  protected override onEnded(): void {
    if (this.ended) return;
    this.ended = true;
    if (this.barrier === undefined) this.cut?.statementEnd();
  }

  protected isCancelError(err: unknown): boolean {
    return isPgCancel(err);
  }

  protected fail(error: Error): void {
    this.earlyError = error;
    if (this.submittable !== undefined) return failSubmittable(this.submittable, error, this.client.connection);
    if (this.userCallback !== undefined) deliver(this.userCallback, error);
  }

  protected answer(err: unknown, results: unknown[]): void {
    deliver(this.userCallback!, err, ...results);
  }

  /** Submittables (pg-cursor, pg-query-stream) report through their own methods; watch those. */
  private watchSubmittable(query: PgQuery): void {
    const { handleError, handleReadyForQuery } = query;
    if (!isFunction(handleError) || !isFunction(handleReadyForQuery)) return;
    const ownError = Object.prototype.hasOwnProperty.call(query, 'handleError');
    const ownReady = Object.prototype.hasOwnProperty.call(query, 'handleReadyForQuery');
    let failure: unknown;
    query.handleError = (err: unknown, connection: unknown) => {
      // Our own error ends nothing on the server; any other (the server's, the connection's) ends the statement.
      if (err !== this.earlyError) this.onEnded();
      if (this.statement.aborted && isPgCancel(err) && !this.delivered) {
        failure = this.statement.errorFor(err);
        this.delivered = true;
        this.statement.settle(failure, 'confirmed');
        return handleError.call(query, failure, connection);
      }
      failure ??= err;
      return handleError.call(query, err, connection);
    };
    query.handleReadyForQuery = (connection: unknown) => {
      if (ownError) query.handleError = handleError;
      else delete query.handleError;
      if (ownReady) query.handleReadyForQuery = handleReadyForQuery;
      else delete query.handleReadyForQuery;
      this.onEnded();
      if (!this.delivered) {
        this.delivered = true;
        if (this.statement.aborted && failure === undefined) this.statement.settleCompletedAfterCutoff('too_late');
        else this.statement.settle(failure, this.cancel === 'told' ? 'unconfirmed' : undefined);
      }
      // pg-cursor would mark itself done and emit 'end', so its next read would see no error.
      if (this.earlyError !== undefined) return;
      return handleReadyForQuery.call(query, connection);
    };
  }
}
