import { onDeadlineAbort, type Deadline } from '../../src/deadline';
import { errorForAbort } from '../../src/errors';

/**
 * A caller's wait for a pool connection (pg-pool, mysql2's pool) under an
 * active deadline: it counts against the budget. At the cutoff the waiter
 * leaves the pool's queue and the caller gets DeadlineExceededError (or
 * DeadlineCancelledError); a connection that arrives for it later goes back
 * to the pool, never to a caller that is gone.
 */
export abstract class PoolWait<Pool> {
  private settled = false;
  private stop: (() => void) | undefined = undefined;
  private pool: Pool | undefined = undefined;
  /** The entry the pool queued for this caller, if it had no connection to give at once. */
  protected waiter: unknown = undefined;

  constructor(
    protected readonly deadline: Deadline,
    private readonly operation: string,
  ) {}

  /**
   * Asks the pool for a connection (`request.call(pool, onAnswer)`) and,
   * unless it answered at once, watches the deadline meanwhile.
   */
  start(pool: Pool, request: (this: unknown, ...args: unknown[]) => unknown, onAnswer: (...args: never[]) => void): void {
    const before = this.queueLength(pool);
    request.call(pool, onAnswer);
    if (this.queueLength(pool) > before) {
      this.pool = pool;
      this.waiter = this.lastQueued(pool);
    }
    if (!this.settled) this.stop = onDeadlineAbort(this.deadline, (reason) => this.onDeadlineAbort(reason));
  }

  /** The pool answered: true if the answer is for the caller, false if the caller left at the cutoff. */
  claim(): boolean {
    if (this.settled) return false;
    this.settled = true;
    this.stop?.();
    this.stop = undefined;
    return true;
  }

  private onDeadlineAbort(reason: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.stop?.();
    this.stop = undefined;
    if (this.pool !== undefined) this.leaveQueue(this.pool);
    this.fail(errorForAbort(reason, this.operation, this.deadline.expiresAtMs));
  }

  protected abstract queueLength(pool: Pool): number;

  protected abstract lastQueued(pool: Pool): unknown;

  /** Takes `waiter` out of the pool's queue, if it is still there. */
  protected abstract leaveQueue(pool: Pool): void;

  /** Gives the caller the error the wait ended with. */
  protected abstract fail(error: Error): void;
}
