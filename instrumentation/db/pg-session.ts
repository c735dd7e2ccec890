import type { PgCancelResult } from './pg-cancel';
import type { PgClient, PgQuery } from './pg-types';

/**
 * What our guards leave behind on one pg connection, which outlives the
 * statement they guarded: cuts whose statement or cancel request has not
 * settled yet, and whether a statement of the current checkout was refused
 * or cut (its transaction may then be left open, or aborted).
 *
 * A PostgreSQL cancel request targets a backend, not a statement: it stops
 * whatever that backend runs when it arrives. So after one is sent the
 * connection runs nothing else until it has settled (CancelBarrier), and a
 * pool checkout is not given back until then (pg-release.ts).
 */
export class PgSession {
  /** Cuts on this connection whose statement has not ended or whose cancel has not settled. */
  private unsettled = 0;
  private waiters: (() => void)[] = [];
  /** A statement of the current checkout was refused or cut at its deadline. */
  touched = false;
  /** We ended the connection: a cancel to it might still arrive. */
  destroyed = false;

  get settled(): boolean {
    return this.unsettled === 0;
  }

  /** Calls `fn` once no cut on the connection is unsettled (at once if none is). */
  whenSettled(fn: () => void): void {
    if (this.unsettled === 0) return fn();
    this.waiters.push(fn);
  }

  /** Removes a `fn` given to whenSettled that has not run. */
  forget(fn: () => void): void {
    const index = this.waiters.indexOf(fn);
    if (index >= 0) this.waiters.splice(index, 1);
  }

  openCut(): PgCut {
    this.unsettled += 1;
    this.touched = true;
    return new PgCut(this);
  }

  /** @internal A cut settled. */
  closeCut(): void {
    this.unsettled -= 1;
    if (this.unsettled > 0) return;
    for (const waiter of this.waiters.splice(0)) waiter();
  }
}

const sessions = new WeakMap<object, PgSession>();

export function sessionOf(client: PgClient): PgSession {
  let session = sessions.get(client);
  if (session === undefined) {
    session = new PgSession();
    sessions.set(client, session);
  }
  return session;
}

/** The session of `client` if a guard ever left anything on it: a plain release looks no further. */
export function existingSessionOf(client: PgClient): PgSession | undefined {
  return sessions.get(client);
}

/**
 * One statement cut in flight: settled once the statement has ended (its
 * result, error or the connection's end reached pg) and the cancel sent for
 * it, if any, has settled.
 */
export class PgCut {
  private statementEnded = false;
  private cancelSettled = true;
  private closed = false;

  constructor(private readonly session: PgSession) {}

  statementEnd(): void {
    this.statementEnded = true;
    this.close();
  }

  cancelSent(): void {
    this.cancelSettled = false;
  }

  cancelEnd(): void {
    this.cancelSettled = true;
    this.close();
  }

  private close(): void {
    if (this.closed || !this.statementEnded || !this.cancelSettled) return;
    this.closed = true;
    this.session.closeCut();
  }
}

/**
 * A Submittable placed first in pg's queue when a statement pg runs is cut:
 * once that statement has ended (its ReadyForQuery), pg submits the barrier
 * next. While a cancel sent for the statement has not settled, the barrier
 * sends nothing; then it sends a Sync, whose ReadyForQuery ends the cut's
 * statement and lets pg go on to the statements that queued meanwhile. A
 * cancel that settles means the server has signalled the backend; the
 * backend drops a cancel that finds it idle, so a statement sent after that
 * cannot be hit by it.
 */
export class CancelBarrier implements PgQuery {
  private connection: { sync?: () => void } | undefined = undefined;

  private constructor(
    private readonly cut: PgCut,
    private open: boolean,
  ) {}

  /** Puts a barrier right behind the statement pg runs now, ahead of everything queued; `open` when no cancel is pending. */
  static place(client: PgClient, cut: PgCut, open: boolean): CancelBarrier | undefined {
    const queue = client._queryQueue;
    if (!Array.isArray(queue)) return undefined;
    const barrier = new CancelBarrier(cut, open);
    queue.unshift(barrier);
    return barrier;
  }

  /** pg calls it when the barrier's turn comes. */
  submit(connection: unknown): void {
    this.connection = connection as { sync?: () => void };
    if (this.open) this.connection.sync?.();
  }

  /** The cancel settled: pg may go on once the statement before the barrier has ended. */
  release(): void {
    if (this.open) return;
    this.open = true;
    this.connection?.sync?.();
  }

  /** The Sync's answer: the cut statement has fully ended; pg goes on to the next statement. */
  handleReadyForQuery(): void {
    this.cut.statementEnd();
  }

  /** The connection ended (pg fails every queued query). */
  handleError(): void {
    this.cut.statementEnd();
  }

  handleRowDescription(): void {}
  handleDataRow(): void {}
  handleCommandComplete(): void {}
  handleEmptyQuery(): void {}
  handleNotice(): void {}
}

/**
 * The connection may still receive a cancel nobody can account for: it is
 * ended so that no other statement ever runs on its backend (pg fails what
 * is queued on it; pg-pool removes it when it is released).
 */
export function destroyPgConnection(client: PgClient, session: PgSession): void {
  session.destroyed = true;
  try {
    const ending = (client as { end?: () => unknown }).end?.call(client) as { catch?: (f: () => void) => unknown } | undefined;
    ending?.catch?.(() => {});
  } catch {
    // already ended
  }
}

/** What settling the cancel means for the connection: go on (barrier released), or end it. */
export function afterCancel(result: PgCancelResult, client: PgClient, barrier: CancelBarrier | undefined, cut: PgCut): void {
  const session = sessionOf(client);
  if (result === 'unsettled') destroyPgConnection(client, session);
  else barrier?.release();
  cut.cancelEnd();
}
