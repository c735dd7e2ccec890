import type { Context, Span } from '@opentelemetry/api';
import { context as contextApi } from '@opentelemetry/api';
import type { Deadline } from '../../src/deadline';
import { budgetLeft, mayStart, refusalAt } from '../call/budget';
import type { ClientHost } from '../call/host';
import { isOwnWrapper, isShimmerWrapper } from '../wrap';
import type { DbCancel } from './attributes';
import { statementDeadline } from './begin';
import { deliver, isFunction } from './deliver';
import { driverInstrumented, type DriverSpanSlot } from './driver-span';
import { isHandedOverUnguarded } from './handover';
import { sendPgCancel, type PgCancelResult } from './pg-cancel';
import { afterCancel, CancelBarrier, sessionOf, type PgCut } from './pg-session';
import { activeQueryOf, isPgCancel, type PgCallback, type PgClient, type PgQuery } from './pg-types';
import { holdsSeveralStatements, sqlCommand, sqlRole, type SqlRole } from './sql';
import { DbStatement, type CutoffHandler, type SpanShape } from './statement';

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;

/**
 * How long a statement whose cancel was sent may take to end before the
 * caller gets its DeadlineExceededError anyway: PostgreSQL answers a cancel
 * within milliseconds, this only bounds a server that does not.
 */
export const CANCEL_GRACE_MS = 1_000;

export const PG_OPERATION = 'pg.query';

/** instrumentation-pg's span name and connection attributes (`pg.query:SELECT test`); never the SQL text. */
export function pgSpanShape(client: PgClient, command: string | undefined): SpanShape {
  const params = client.connectionParameters ?? {};
  const database = params.database;
  const attributes: Record<string, string | number> = { 'db.system.name': 'postgresql' };
  if (typeof database === 'string') attributes['db.namespace'] = database;
  if (typeof params.host === 'string') attributes['server.address'] = params.host;
  if (typeof params.port === 'number') attributes['server.port'] = params.port;
  if (command !== undefined) attributes['db.operation.name'] = command;
  return { name: `${PG_OPERATION}:${command ?? 'unknown'}${typeof database === 'string' ? ` ${database}` : ''}`, attributes };
}

/** The first words that may give a statement a role other than `work` (sql.ts): only those texts are scanned. */
const ROLE_WORDS = new Set(['ROLLBACK', 'ABORT', 'DISCARD', 'RESET', 'CLOSE', 'DEALLOCATE', 'UNLISTEN', 'COMMIT', 'END']);

/** The statement's role in its session's transaction (sql.ts), scanning the text only when its first word may give one. */
function pgRole(text: unknown): SqlRole {
  if (typeof text !== 'string') return 'work';
  const command = sqlCommand(text);
  // No first word before a comment or quote: let the scan read it.
  return command === undefined || ROLE_WORDS.has(command) ? sqlRole(text, 'postgres') : 'work';
}

/**
 * A pg statement's guard. A text that holds several statements (the simple
 * protocol runs `INSERT …; SELECT pg_sleep(5)` in one go) may have changed
 * data before the part that was cancelled, whatever its first word says.
 */
class PgStatement extends DbStatement {
  /** Asked only at a cutoff: it reads the whole text. */
  holdsSeveral(): boolean {
    return holdsSeveralStatements(this.subject, 'postgres');
  }

  protected override isWrite(): boolean {
    return this.holdsSeveral() || super.isWrite();
  }
}

/** Gives a refused or cut query its error without anything being sent, the way pg fails a query itself. */
export function failSubmittable(query: PgQuery, error: Error, connection: unknown): void {
  // A stream (pg-query-stream) reports through 'error' only once destroyed; a cursor through handleError.
  if (isFunction(query.destroy) && query.readable !== undefined) query.destroy(error);
  else query.handleError?.(error, connection);
}

/** Client#query under an active deadline: refused, or sent and guarded until its result is delivered. */
export function makePgQueryWrapper(host: ClientHost, slot: DriverSpanSlot, owner: object) {
  return (original: AnyFunction): AnyFunction => {
    // An instrumentation-pg registered before us wraps the method below ours: fixed for this wrapper's life.
    const instrumentedBelow = isShimmerWrapper(original);
    return function query(this: unknown, ...args: unknown[]): unknown {
      // An instrumentation-pg on top of us announced its span for this query through its requestHook a moment ago.
      const outerSpan = slot.take(queryTextOf(args[0]));
      if (isHandedOverUnguarded(this)) return original.apply(this, args);
      const ctx = contextApi.active();
      const deadline = statementDeadline(host, 'pg', ctx);
      const role = deadline === undefined || args[0] === null || args[0] === undefined ? undefined : pgRole(queryTextOf(args[0]));
      // A statement that ends a transaction without committing or puts session state back is never refused or cut.
      if (role === undefined || role === 'cleanup') {
        return instrumentedBelow ? slot.passThrough(original, this, args) : original.apply(this, args);
      }
      return guardedQuery(host, slot, owner, original, this as PgClient, args, deadline!, ctx, outerSpan, role === 'commit');
    };
  };
}

/** The text of a query given as a string or a config object, as instrumentation-pg's requestHook reports it. */
function queryTextOf(config: unknown): unknown {
  return typeof config === 'string' ? config : typeof config === 'object' && config !== null ? (config as { text?: unknown }).text : undefined;
}

/** The caller's callback: `(text, cb)`, `(text, values, cb)` or a config object's `callback`. */
function callbackOf(args: unknown[]): ((...a: never[]) => unknown) | undefined {
  if (isFunction(args[1])) return args[1];
  if (isFunction(args[2])) return args[2];
  const fromConfig = (args[0] as { callback?: unknown }).callback;
  return isFunction(fromConfig) ? fromConfig : undefined;
}

/** Runs `then` once the step before the caller hears of its refusal is done. */
type BeforeRefusal = (then: () => void) => void;

const onNextTick: BeforeRefusal = (then) => process.nextTick(then);

function refuse(client: PgClient, args: unknown[], submittable: PgQuery | undefined, error: Error, before: BeforeRefusal = onNextTick): unknown {
  if (submittable !== undefined) {
    before(() => failSubmittable(submittable, error, client.connection));
    return submittable;
  }
  const callback = callbackOf(args);
  if (callback !== undefined) {
    before(() => deliver(callback, error));
    return undefined;
  }
  if (before === onNextTick) return (client._Promise ?? Promise).reject(error);
  return new (client._Promise ?? Promise)((_resolve, reject) => before(() => reject(error)));
}

/**
 * A COMMIT refused at the cutoff: the transaction is rolled back before the
 * caller hears of the refusal, so nothing of it is committed later by
 * whoever runs the next COMMIT on this connection, and no lock is held. The
 * ROLLBACK goes below our wrapper, unguarded; whatever it answers (a warning
 * when no transaction was open, an error on a dead connection), the caller
 * then gets the refusal.
 */
function rollBackFirst(slot: DriverSpanSlot, original: AnyFunction, client: PgClient): BeforeRefusal {
  return (then) => {
    try {
      slot.passThrough(original, client, ['ROLLBACK', () => then()]);
    } catch {
      process.nextTick(then);
    }
  };
}

function guardedQuery(
  host: ClientHost,
  slot: DriverSpanSlot,
  owner: object,
  original: AnyFunction,
  client: PgClient,
  args: unknown[],
  deadline: Deadline,
  ctx: Context,
  outerSpan: Span | undefined,
  commits: boolean,
): unknown {
  const config = args[0] as PgQuery | string;
  const submittable = typeof config === 'object' && isFunction(config.submit) ? config : undefined;
  const text = typeof config === 'string' ? config : config.text;
  const observe = host.settings.mode === 'observe';
  // The command is read from the text only when it is needed: at a cutoff, or for a span of our own.
  const statement = new PgStatement(deadline, observe, PG_OPERATION, undefined, text);
  if (outerSpan !== undefined) statement.adoptSpan(outerSpan);
  // The one clock read before sending: refusal and arming both go by it.
  const left = budgetLeft(deadline);
  const minUsefulMs = host.settings.minUsefulMs;
  const refusal = mayStart(left, minUsefulMs) ? undefined : refusalAt(deadline, left, PG_OPERATION, minUsefulMs);
  const weAreOutermost = isOwnWrapper(client.query, owner);
  // A refused query never reaches an instrumentation below us; one above us shows its span through the hook.
  if (outerSpan === undefined && (!driverInstrumented(original, client.query, owner) || (refusal !== undefined && weAreOutermost))) {
    statement.startOwnSpan(host.tracer, ctx, pgSpanShape(client, sqlCommand(text)));
  }
  if (refusal !== undefined) {
    if (!observe) {
      statement.refuse(refusal);
      // The caller's transaction (if any) is no longer what it left: a pool checks it at release (pg-release.ts).
      sessionOf(client).touched = true;
      return refuse(client, args, submittable, refusal, commits ? rollBackFirst(slot, original, client) : undefined);
    }
    statement.markWouldReject();
  }
  // An admitted COMMIT is not cut: a cancel cannot undo a commit under way, only leave its outcome unknown.
  return new GuardedPgQuery(client, statement, submittable, !commits).run(slot, original, args);
}

/** One query between dispatch and delivery: finds it in pg's queues at the cutoff, cancels it, delivers once. */
class GuardedPgQuery implements CutoffHandler {
  private query: PgQuery | undefined;
  private userCallback: PgCallback | undefined;
  private delivered = false;
  private cancel: 'none' | 'pending' | PgCancelResult = 'none';
  /** Set once the cutoff reached the statement in flight: what it leaves on the connection until it settles. */
  private cut: PgCut | undefined = undefined;
  private barrier: CancelBarrier | undefined = undefined;
  /** pg has reported the statement's end. */
  private ended = false;
  /** The grace ran out while the cancel was on its way: a result that comes is returned. */
  private graceOver = false;
  /** The error deliverEarly gave the caller. */
  private earlyError: Error | undefined;
  /** A result that arrived while the cancel request was still on its way: held until the server closed it. */
  private held: (() => void) | undefined;
  private ownError: Error | undefined;
  private grace: ReturnType<typeof setTimeout> | undefined;
  /** We failed the submittable ourselves: its end-of-statement must not turn the error into an `end`. */
  private failedByUs = false;

  constructor(
    private readonly client: PgClient,
    private readonly statement: PgStatement,
    private readonly submittable: PgQuery | undefined,
    private readonly cuttable: boolean,
  ) {}

  run(slot: DriverSpanSlot, original: AnyFunction, args: unknown[]): unknown {
    const { client } = this;
    let callArgs = args;
    let promise: Promise<unknown> | undefined;
    if (this.submittable === undefined) {
      const found = callbackOf(args);
      if (found !== undefined) this.userCallback = found as PgCallback;
      else {
        promise = new (client._Promise ?? Promise)((resolve, reject) => {
          this.userCallback = (err, res) => (err ? reject(err) : resolve(res));
        });
      }
      const values = isFunction(args[1]) ? undefined : args[1];
      callArgs = [args[0], values, (err: unknown, res: unknown) => this.onDriverResult(err, res)];
    } else {
      this.watchSubmittable(this.submittable);
    }
    const queue = client._queryQueue;
    const queuedBefore = queue?.length ?? 0;
    const activeBefore = activeQueryOf(client);
    const result = slot.dispatch(this.statement, original, client, callArgs);
    this.query = this.submittable ?? this.locate(queuedBefore, activeBefore);
    if (this.submittable === undefined) this.settleFirst(this.query);
    if (this.cuttable) this.statement.arm(this);
    return promise ?? result;
  }

  /**
   * Settles the statement (its outcome on the span) the moment pg reports its
   * end, before the callbacks it was given run: an instrumentation-pg below
   * us wrapped ours and ends its span before calling it.
   */
  private settleFirst(query: PgQuery | undefined): void {
    const driverCallback = query?.callback;
    if (query === undefined || !isFunction(driverCallback)) return;
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const self = this;
    query.callback = function (this: unknown, err: unknown, res: unknown) {
      self.markEnded();
      if (!self.delivered) self.settleFrom(err);
      return (driverCallback as PgCallback).call(this, err, res);
    };
  }

  /** The statement's outcome from the driver's answer, whichever callback learns it first. */
  private settleFrom(err: unknown): void {
    const { statement } = this;
    if (statement.settled) return;
    const failed = err !== undefined && err !== null;
    if (!statement.aborted) return statement.settle(failed ? err : undefined);
    if (failed && err === this.ownError) return statement.settle(err, undefined, false);
    if (!failed) return statement.settleCompletedAfterCutoff('too_late');
    // Several statements in one text: the 57014 stopped the one running, those before it may have run.
    if (isPgCancel(err)) return statement.settle(statement.errorFor(err), statement.holdsSeveral() ? 'unconfirmed' : 'confirmed');
    // It failed on its own (a constraint, a lost connection): that error is the truth.
    statement.settle(err, this.cancel === 'not_told' ? 'not_told' : 'unconfirmed');
  }

  /** The Query pg made for this call: the newest in its queue, or the one it started at once. */
  private locate(queuedBefore: number, activeBefore: PgQuery | null | undefined): PgQuery | undefined {
    const queue = this.client._queryQueue;
    if (queue !== undefined && queue.length > queuedBefore) return queue[queue.length - 1];
    const active = activeQueryOf(this.client);
    return active !== activeBefore && active !== null ? active : undefined;
  }

  onCutoff(): void {
    const { client, query } = this;
    const session = sessionOf(client);
    // The caller's transaction (if any) is no longer what it left: a pool checks it at release (pg-release.ts).
    session.touched = true;
    const queue = client._queryQueue;
    const index = query === undefined || queue === undefined ? -1 : queue.indexOf(query);
    if (index >= 0) {
      // Not sent yet: it leaves pg's queue and fails through the driver's own path.
      queue!.splice(index, 1);
      this.ownError = this.statement.errorFor();
      if (this.submittable !== undefined) {
        this.statement.settle(this.ownError, undefined, false);
        return failSubmittable(this.submittable, this.ownError, client.connection);
      }
      return query!.handleError?.(this.ownError, client.connection);
    }
    if (query === undefined || query !== activeQueryOf(client) || client.pipeline === true) {
      // pg no longer runs it (its result is on the way) or we cannot tell which statement the backend runs.
      if (query !== undefined) this.openCut(false);
      return this.deliverEarly('not_told');
    }
    const cursorState = ((query as { cursor?: PgQuery }).cursor ?? query).state;
    // A cursor suspended between reads runs nothing on the server: closing its portal is all it takes.
    if (this.submittable !== undefined && cursorState === 'idle') return this.deliverEarly(undefined);
    const params = client.connectionParameters ?? {};
    // A custom stream: we cannot reach the server ourselves.
    const canCancel = params.stream === undefined;
    // The cancel stops whatever the backend runs when it lands: nothing queued may start before it has settled.
    this.openCut(canCancel);
    this.cancel = 'pending';
    if (!canCancel) return this.onCancelSent('not_told');
    const target = { host: params.host, port: params.port, processID: client.processID, secretKey: client.secretKey };
    this.grace = setTimeout(() => this.onGrace(), CANCEL_GRACE_MS);
    this.grace.unref();
    sendPgCancel(target, (result) => this.onCancelSent(result));
  }

  /**
   * The statement was sent and is cut: the connection is not fit for anyone
   * else until it has fully ended (and `cancelPending`, until its cancel has
   * settled). A placeholder right behind it in pg's queue tells when: it
   * passes after the statement's ReadyForQuery, so the transaction status
   * pg has then is the one the statement left (pg calls a statement back on
   * its error, before that ReadyForQuery).
   */
  private openCut(cancelPending: boolean): void {
    const cut = sessionOf(this.client).openCut();
    this.cut = cut;
    if (cancelPending) cut.cancelSent();
    // pg's pipeline mode has sent what is queued already: nothing can be placed behind the statement.
    if (this.client.pipeline !== true) this.barrier = CancelBarrier.place(this.client, cut, !cancelPending);
    if (this.barrier === undefined && this.ended) cut.statementEnd();
  }

  /** pg has the statement's end (its result, its error, or the connection's end). */
  private markEnded(): void {
    if (this.ended) return;
    this.ended = true;
    if (this.barrier === undefined) this.cut?.statementEnd();
  }

  private onCancelSent(result: PgCancelResult): void {
    this.cancel = result;
    const held = this.held;
    this.held = undefined;
    if (held !== undefined) held();
    // The server cannot be told, or did not answer: the caller gets its error now, the statement may run on.
    else if (result !== 'told') this.deliverEarly(result === 'not_told' ? 'not_told' : 'unconfirmed');
    // Only now may the connection run anything else; a cancel that may still land ends the connection.
    if (this.cut !== undefined) afterCancel(result, this.client, this.barrier, this.cut);
  }

  /**
   * The cancel took too long: a result that already came is returned (the
   * statement finished, its span says so), otherwise the caller gets its
   * error. The connection still runs nothing else until the cancel settles
   * (the barrier), or is ended if it never does.
   */
  private onGrace(): void {
    const held = this.held;
    if (held === undefined) return this.deliverEarly(this.cancel === 'told' ? 'unconfirmed' : 'not_told');
    this.held = undefined;
    this.graceOver = true;
    held();
  }

  /** The caller gets DeadlineExceededError before the driver's answer; that answer is dropped when it comes. */
  private deliverEarly(cancel: DbCancel | undefined): void {
    if (this.delivered) return;
    this.delivered = true;
    clearTimeout(this.grace);
    const error = this.statement.errorFor();
    this.earlyError = error;
    this.statement.settle(error, cancel, true);
    if (this.submittable !== undefined) {
      this.failedByUs = true;
      return failSubmittable(this.submittable, error, this.client.connection);
    }
    if (this.userCallback !== undefined) deliver(this.userCallback, error);
  }

  private onDriverResult(err: unknown, res: unknown): void {
    this.markEnded();
    if (this.delivered) return;
    if (this.cancel === 'pending' && !this.graceOver) {
      this.held = () => this.onDriverResult(err, res);
      return;
    }
    this.delivered = true;
    clearTimeout(this.grace);
    const callback = this.userCallback!;
    const aborted = this.statement.aborted;
    this.settleFrom(err);
    if (!aborted || err === undefined || err === null) return deliver(callback, err, res);
    deliver(callback, isPgCancel(err) ? this.statement.errorFor(err) : err);
  }

  /** Submittables (pg-cursor, pg-query-stream) report through their own methods; watch those. */
  private watchSubmittable(query: PgQuery): void {
    const handleError = query.handleError;
    const handleReadyForQuery = query.handleReadyForQuery;
    if (!isFunction(handleError) || !isFunction(handleReadyForQuery)) return;
    const ownError = Object.prototype.hasOwnProperty.call(query, 'handleError');
    const ownReady = Object.prototype.hasOwnProperty.call(query, 'handleReadyForQuery');
    const restore = () => {
      if (ownError) query.handleError = handleError;
      else delete query.handleError;
      if (ownReady) query.handleReadyForQuery = handleReadyForQuery;
      else delete query.handleReadyForQuery;
    };
    let failure: unknown;
    query.handleError = (err: unknown, connection: unknown) => {
      // Our own error ends nothing on the server; any other (the server's, the connection's) ends the statement.
      if (err !== this.earlyError && err !== this.ownError) this.markEnded();
      if (this.statement.aborted && isPgCancel(err) && !this.delivered) {
        failure = this.statement.errorFor(err);
        this.delivered = true;
        clearTimeout(this.grace);
        this.statement.settle(failure, 'confirmed');
        return handleError.call(query, failure, connection);
      }
      failure ??= err;
      return handleError.call(query, err, connection);
    };
    query.handleReadyForQuery = (connection: unknown) => {
      restore();
      this.markEnded();
      if (!this.delivered) {
        this.delivered = true;
        clearTimeout(this.grace);
        if (this.statement.aborted && failure === undefined) this.statement.settleCompletedAfterCutoff('too_late');
        else this.statement.settle(failure, this.cancel === 'told' ? 'unconfirmed' : undefined);
      }
      // pg-cursor would mark itself done and emit 'end', so its next read would see no error.
      if (this.failedByUs) return;
      return handleReadyForQuery.call(query, connection);
    };
  }
}
