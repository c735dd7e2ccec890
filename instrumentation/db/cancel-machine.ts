import { isFunction } from './driver-call';
import type { CutoffHandler, DbCancel, DbStatement } from './statement';

/** How long a statement whose cancel was sent may take to end before the caller gets its error anyway. */
export const CANCEL_GRACE_MS = 1_000;

/** How long the cancel path itself may take (a PostgreSQL cancel request, a `KILL QUERY`): a bound, not a wait. */
export const CANCEL_BOUND_MS = 2_000;

/** `told`: acknowledged; `not_told`: nothing reached the server; `unsettled`: sent, not acknowledged in time, may still land. */
export type CancelResult = 'told' | 'not_told' | 'unsettled';

type Results = unknown[];

/**
 * One SQL statement and the cancel sent for it at the cutoff (pg's cancel request, mysql2's `KILL QUERY`). A cancel
 * stops whatever the connection runs when it lands, so the driver part holds the connection back (pg: a barrier in its
 * queue; mysql2: `pause()`) until it has settled, and ends it past the bound. A result that comes meanwhile waits for
 * the cancel or the grace; the caller is answered once.
 */
export abstract class CancelMachine implements CutoffHandler {
  protected delivered = false;
  protected cancel: 'none' | 'pending' | CancelResult = 'none';
  private held: (() => void) | undefined;
  private graceOver = false;
  private grace: ReturnType<typeof setTimeout> | undefined;

  constructor(protected readonly statement: DbStatement) {}

  abstract onCutoff(reason: unknown): void;

  /** The text holds several statements: a cancel stops the one running, those before it may have run. Asked only then. */
  protected abstract holdsSeveral(): boolean;

  /** `done` once, with what became of the cancel. */
  protected abstract sendCancel(done: (result: CancelResult) => void): void;

  /** The cancel settled: the connection goes on, or is ended when the cancel may still land (`unsettled`). */
  protected abstract afterCancel(result: CancelResult): void;

  /** Gives the caller the error now, before the driver's answer. */
  protected abstract fail(error: Error): void;
  protected abstract answer(err: unknown, results: Results): void;

  /** The server's answer to a statement its cancel stopped (57014, 1317). */
  protected abstract isCancelError(err: unknown): boolean;

  protected onEnded(): void {}

  protected startCancel(): void {
    this.cancel = 'pending';
    this.grace = setTimeout(() => this.onGrace(), CANCEL_GRACE_MS);
    this.grace.unref();
    this.sendCancel((result) => this.onCancelSettled(result));
  }

  private onCancelSettled(result: CancelResult): void {
    if (this.cancel !== 'pending') return;
    this.cancel = result;
    if (this.held !== undefined) this.held();
    // The server cannot be told, or did not answer: the caller gets its error now, the statement may run on.
    else if (result !== 'told') this.deliverEarly(result === 'not_told' ? 'not_told' : 'unconfirmed');
    this.afterCancel(result);
  }

  /** The grace ran out: a result that came is returned, else the caller gets its error; the connection stays held. */
  private onGrace(): void {
    this.graceOver = true;
    if (this.held === undefined) this.deliverEarly(this.cancel === 'told' ? 'unconfirmed' : 'not_told');
    else this.held();
  }

  /** The caller gets DeadlineExceededError before the driver's answer; that answer is dropped when it comes. */
  protected deliverEarly(cancel: DbCancel | undefined, sent = true): void {
    if (this.delivered) return;
    this.delivered = true;
    clearTimeout(this.grace);
    const error = this.statement.errorFor();
    this.statement.settle(error, cancel, sent);
    this.fail(error);
  }

  readonly onResult = (err: unknown, ...results: Results): void => {
    this.onEnded();
    if (this.delivered) return;
    if (this.cancel === 'pending' && !this.graceOver) {
      // An answer while the cancel is on its way: it waits for the cancel, like what is queued behind it.
      this.held = () => this.onResult(err, ...results);
      return;
    }
    this.delivered = true;
    clearTimeout(this.grace);
    const aborted = this.statement.aborted;
    this.settleFrom(err);
    if (!aborted || err === undefined || err === null) return this.answer(err, results);
    // Our cancel's error, and that of a connection we ended, are ours: the caller gets our error, the driver's as cause.
    this.answer(this.isCancelError(err) || this.cancel === 'unsettled' ? this.statement.errorFor(err) : err, []);
  };

  /** The statement's outcome from the driver's answer, whichever callback learns it first. */
  protected settleFrom(err: unknown): void {
    const { statement } = this;
    if (statement.settled) return;
    const failed = err !== undefined && err !== null;
    if (!statement.aborted) return statement.settle(failed ? err : undefined);
    if (!failed) return statement.settleCompletedAfterCutoff('too_late');
    if (this.isCancelError(err)) return statement.settle(statement.errorFor(err), this.holdsSeveral() ? 'unconfirmed' : 'confirmed');
    // It failed on its own (a constraint, a lost connection): that error is the truth.
    statement.settle(err, this.cancel === 'not_told' ? 'not_told' : 'unconfirmed');
  }

  /** Settles the statement as the driver reports its end (pg `Query#callback`, mysql2 `command.onResult`), before an instrumentation below us ends its span. */
  protected settleFirst(target: object | undefined, key: string): void {
    const record = target as Record<string, unknown> | undefined;
    const original = record?.[key];
    if (record === undefined || !isFunction(original)) return;
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const self = this;
    record[key] = function (this: unknown, err: unknown, ...results: Results) {
      self.onEnded();
      if (!self.delivered) self.settleFrom(err);
      return (original as (...a: unknown[]) => unknown).call(this, err, ...results);
    };
  }
}
