import type { DbCancel } from './attributes';
import { deliver, isFunction } from './deliver';
import { CANCEL_GRACE_MS } from './pg-query';
import type { MysqlKiller } from './mysql2-kill';
import { markTransactionUnknown } from './mysql2-session';
import type { CutoffHandler, DbStatement } from './statement';

type Callback = (err: unknown, ...results: unknown[]) => void;

/** ER_QUERY_INTERRUPTED: what MariaDB/MySQL answers a statement `KILL QUERY` stopped. */
export const ER_QUERY_INTERRUPTED = 1317;

export interface MysqlCommand {
  sql?: unknown;
  emit?: (event: string) => unknown;
  onResult?: unknown;
  next?: unknown;
  start?: unknown;
}

export interface MysqlConnection {
  query: unknown;
  threadId?: unknown;
  config?: { host?: unknown; port?: unknown; user?: unknown; database?: unknown; socketPath?: unknown; multipleStatements?: unknown };
  _command?: unknown;
  pause?: () => void;
  resume?: () => void;
  destroy?: () => void;
}

function isInterrupted(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { errno?: unknown }).errno === ER_QUERY_INTERRUPTED;
}

/**
 * One guarded mysql2 statement between the driver and its caller: the
 * caller's callback gets the driver's answer, or at the cutoff the
 * statement is stopped on the server with `KILL QUERY`.
 *
 * The kill is aimed at the connection's thread, not at the statement, so it
 * would stop whatever that thread runs when it arrives. From the moment it
 * is sent until the server has answered it, the connection is paused
 * (mysql2's public pause()): it reads no answer, so the statement cannot be
 * seen to end, nothing queued behind it on the connection starts, and a pool
 * (whose `query` releases its connection when the statement ends) gets the
 * connection back only after the kill has settled. If the kill does not
 * settle within CANCEL_GRACE_MS the connection is destroyed instead: it is
 * never used again with a kill in flight.
 */
export class GuardedMysqlStatement implements CutoffHandler {
  command: MysqlCommand | undefined;
  private delivered = false;
  private kill: 'none' | 'pending' | 'told' | 'not_told' | 'destroyed' = 'none';
  private held: (() => void) | undefined;
  private bound: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly connection: MysqlConnection,
    private readonly statement: DbStatement,
    private readonly killer: MysqlKiller,
    private readonly callback: Callback,
    /** The text holds several statements: a kill stops the one running, those before it ran. */
    private readonly several: boolean,
  ) {}

  readonly driverCallback = (err: unknown, ...results: unknown[]): void => {
    if (this.delivered) return;
    if (this.kill === 'pending') {
      // An answer read before the pause took effect: it waits for the kill like the others.
      this.held = () => this.driverCallback(err, ...results);
      return;
    }
    this.delivered = true;
    clearTimeout(this.bound);
    const aborted = this.statement.aborted;
    this.settleFrom(err);
    if (!aborted || err === undefined || err === null) return deliver(this.callback, err, ...results);
    // Our kill's 1317, and the error of a connection we destroyed, are ours: the caller gets our error.
    deliver(this.callback, isInterrupted(err) || this.kill === 'destroyed' ? this.statement.errorFor(err) : err);
  };

  /**
   * Settles the statement (its outcome on the span) the moment mysql2 reports
   * its end, before the callbacks it was given run: an instrumentation-mysql2
   * below us wrapped ours and ends its span before calling it.
   */
  settleFirst(): void {
    const { command } = this;
    const onResult = command?.onResult;
    if (command === undefined || !isFunction(onResult)) return;
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const self = this;
    command.onResult = function (this: unknown, err: unknown, ...results: unknown[]) {
      if (!self.delivered) self.settleFrom(err);
      return (onResult as Callback).call(this, err, ...results);
    };
  }

  /** The statement's outcome from the driver's answer, whichever callback learns it first. */
  private settleFrom(err: unknown): void {
    const { statement } = this;
    if (statement.settled) return;
    const failed = err !== undefined && err !== null;
    if (!statement.aborted) return statement.settle(failed ? err : undefined);
    if (!failed) return statement.settleCompletedAfterCutoff('too_late');
    // With several statements the 1317 confirms only the last one stopped: the ones before it ran.
    if (isInterrupted(err)) return statement.settle(statement.errorFor(err), this.several ? 'unconfirmed' : 'confirmed');
    statement.settle(err, this.kill === 'told' ? 'unconfirmed' : 'not_told');
  }

  onCutoff(): void {
    const { command, connection } = this;
    // Whatever the caller had open on this connection, it no longer knows in which state.
    markTransactionUnknown(connection);
    if (command !== undefined && command.next === null && connection._command !== command) {
      // Still queued on the connection: it will be skipped when its turn comes, never sent.
      command.start = () => null;
      return this.deliverEarly(undefined, false);
    }
    if (connection.config === undefined || !isFunction(connection.pause) || !isFunction(connection.resume)) return this.deliverEarly('not_told', true);
    this.kill = 'pending';
    connection.pause();
    this.bound = setTimeout(() => this.onBound(), CANCEL_GRACE_MS);
    this.bound.unref();
    this.killer.kill(connection.config, connection.threadId, (told) => this.onKillSettled(told));
  }

  /** The server answered the KILL (or it could not be sent): the connection reads its answers again, in order. */
  private onKillSettled(told: boolean): void {
    if (this.kill !== 'pending') return; // the bound came first: the connection is destroyed
    clearTimeout(this.bound);
    this.kill = told ? 'told' : 'not_told';
    // Not told: the statement may run on; the caller gets its error now, the connection stays busy until it ends.
    if (!told) this.deliverEarly('not_told', true);
    this.connection.resume!();
    this.releaseHeld();
  }

  /**
   * The KILL did not settle in time: it may still reach the server and stop
   * whatever the connection's thread runs then, so the connection is
   * destroyed (a pool opens a new one for its next waiter) and the caller
   * gets its error now. Resumed, the destroyed connection drains: a result
   * still on its way goes to nobody, a command queued behind fails with
   * mysql2's closed-connection error, never reaching the server.
   */
  private onBound(): void {
    if (this.kill !== 'pending') return;
    this.kill = 'destroyed';
    this.held = undefined;
    this.deliverEarly('not_told', true);
    this.connection.destroy!();
    this.connection.resume!();
  }

  private releaseHeld(): void {
    const held = this.held;
    this.held = undefined;
    held?.();
  }

  private deliverEarly(cancel: DbCancel | undefined, sent: boolean): void {
    if (this.delivered) return;
    this.delivered = true;
    clearTimeout(this.bound);
    const error = this.statement.errorFor();
    this.statement.settle(error, cancel, sent);
    deliver(this.callback, error);
  }
}
