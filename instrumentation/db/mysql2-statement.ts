import { CancelMachine, type CancelResult } from './cancel-machine';
import { deliver, type NodeCallback } from './deliver';
import { markTransactionUnknown, type MysqlKiller } from './mysql2-connection';
import type { DbStatement } from './statement';

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

/**
 * A mysql2 statement stopped at the cutoff with `KILL QUERY`. Until the kill settles the connection is paused
 * (public pause()): it reads no answer, so nothing queued behind starts, and a pool gets it back only then.
 */
export class GuardedMysqlStatement extends CancelMachine {
  command: MysqlCommand | undefined;

  constructor(
    private readonly connection: MysqlConnection,
    statement: DbStatement,
    private readonly killer: MysqlKiller,
    private readonly callback: NodeCallback,
    several: boolean,
  ) {
    super(statement, () => several);
  }

  settleBeforeDriver(): void {
    this.settleFirst(this.command, 'onResult');
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
    if (connection.config === undefined || typeof connection.pause !== 'function' || typeof connection.resume !== 'function') return this.deliverEarly('not_told');
    connection.pause();
    this.startCancel();
  }

  protected sendCancel(done: (result: CancelResult) => void): void {
    this.killer.kill(this.connection.config!, this.connection.threadId, done);
  }

  /**
   * Resumed, the connection reads its answers again. A kill that may still land ends it first: a queued command then
   * fails with mysql2's closed-connection error, never reaching the server.
   */
  protected afterCancel(result: CancelResult): void {
    if (result === 'unsettled') this.connection.destroy?.();
    this.connection.resume!();
  }

  protected isCancelError(err: unknown): boolean {
    return typeof err === 'object' && err !== null && (err as { errno?: unknown }).errno === ER_QUERY_INTERRUPTED;
  }

  protected fail(error: Error): void {
    deliver(this.callback, error);
  }

  protected answer(err: unknown, results: unknown[]): void {
    deliver(this.callback, err, ...results);
  }
}
