import { unwatchDeadline, watchDeadline, type Deadline } from '../../src/deadline';
import type { AbortWatcher } from '../../src/deadline-node';
import { errorForAbort } from '../../src/errors';
import { deliver } from './driver-call';

/** A pool's queue of waiters: what it holds now (a snapshot), and how one entry leaves it. */
export interface WaiterQueue<Pool> {
  entries(pool: Pool): readonly unknown[];
  leave(pool: Pool, entry: unknown): void;
}

type Answer = (err: unknown, connection?: never, ...rest: never[]) => void;

/** A wait for a pool connection under a deadline: at the cutoff the waiter leaves the pool's queue (docs/internals.md); a later connection goes back. */
export class PoolWait<Pool> implements AbortWatcher {
  private settled = false;
  private pool: Pool | undefined = undefined;
  private entry: unknown = undefined;

  constructor(
    private readonly deadline: Deadline,
    private readonly operation: string,
    private readonly queue: WaiterQueue<Pool>,
    private readonly callback: Answer,
    private readonly giveBack: (connection: never, rest: never[]) => void,
    private readonly failed?: (error: Error) => void,
  ) {}

  /** Asks the pool for a connection and, unless it answered at once, watches the deadline. */
  start(pool: Pool, request: (this: unknown, ...args: unknown[]) => unknown): void {
    const before = this.queue.entries(pool).length;
    request.call(pool, this.answer);
    const after = this.queue.entries(pool);
    if (after.length > before) {
      this.pool = pool;
      this.entry = after[after.length - 1];
    }
    if (!this.settled) watchDeadline(this.deadline, this);
  }

  readonly answer: Answer = (err, connection, ...rest) => {
    if (this.finish()) return deliver(this.callback, err, connection, ...rest);
    if ((err === null || err === undefined) && connection !== undefined) this.giveBack(connection, rest);
  };

  private finish(): boolean {
    if (this.settled) return false;
    this.settled = true;
    unwatchDeadline(this.deadline, this);
    return true;
  }

  /** @internal */
  onAbort(reason: unknown): void {
    if (!this.finish()) return;
    if (this.pool !== undefined) this.queue.leave(this.pool, this.entry);
    const error = errorForAbort(reason, this.operation, this.deadline.expiresAtMs);
    this.failed?.(error);
    deliver(this.callback, error);
  }
}
