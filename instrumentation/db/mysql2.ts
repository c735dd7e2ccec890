import { context, type Context, type Span } from '@opentelemetry/api';
import type { Deadline } from '../../src/deadline';
import { refusalFor } from '../call/budget';
import type { ClientHost } from '../call/host';
import type { MethodPatch } from '../wrap';
import { type AnyFunction, deliver, type Exports, isFunction, type NodeCallback, statementDeadline, wrapWhereDefined } from './driver-call';
import { dbSpanShape, needsOwnSpan, type DriverSpanSlot } from './driver-span';
import { patchMysql2Pool } from './mysql2-pool';
import { markTransactionUnknown, MysqlKiller, patchMysql2PoolConnection, rollBack } from './mysql2-connection';
import { holdsSeveralStatements, sqlCommand, sqlRole, type SqlRole } from './sql';
import { CancelMachine, type CancelResult } from './cancel-machine';
import { DbStatement, type SpanShape } from './statement';

const OPERATION = 'mysql2.query';

/** instrumentation-mysql2's span name and connection attributes; never the SQL text. */
function mysqlSpanShape(connection: MysqlConnection, command: string | undefined): SpanShape {
  const config = connection.config ?? {};
  return dbSpanShape(command ?? 'mysql', 'mysql', command, config.database, config.host, config.port);
}

/** The patches for mysql2's main module. */
export function patchMysql2(moduleExports: Exports, host: ClientHost, slot: DriverSpanSlot, owner: object, isActive: () => boolean): MethodPatch[] {
  const exports = (moduleExports.Connection === undefined && typeof moduleExports.default === 'object' ? moduleExports.default : moduleExports) as Exports;
  return [
    ...patchMysql2Connection(exports.Connection, host, slot, owner, isActive),
    ...patchMysql2Pool(exports.Pool, host, slot, owner, isActive),
    ...patchMysql2PoolConnection(exports.PoolConnection, host, slot, owner, isActive),
  ];
}

/** `query` and `execute` of mysql2's Connection (lib/connection.js, hooked as a file too for `mysql2/promise`-only apps). */
export function patchMysql2Connection(Connection: unknown, host: ClientHost, slot: DriverSpanSlot, owner: object, isActive: () => boolean): MethodPatch[] {
  if (typeof Connection !== 'function') return [];
  const killer = new MysqlKiller(Connection as new (opts: { config: unknown }) => never);
  const wrap = (method: string) => makeStatementWrapper(host, slot, owner, killer, method);
  return wrapWhereDefined(Connection, { query: wrap('query'), execute: wrap('execute') }, owner, isActive);
}

function makeStatementWrapper(host: ClientHost, slot: DriverSpanSlot, owner: object, killer: MysqlKiller, method: string) {
  return (original: AnyFunction): AnyFunction =>
    function statement(this: unknown, ...args: unknown[]): unknown {
      // instrumentation-mysql2 has no requestHook: its span reaches the slot as it starts under a deadline.
      const outerSpan = slot.take(undefined);
      const ctx = context.active();
      const deadline = statementDeadline(host, 'mysql2', ctx);
      const first = args[0] as string | MysqlCommand | null | undefined;
      if (deadline !== undefined && first !== null && first !== undefined) {
        const sql = typeof first === 'object' ? first.sql : first;
        const verb = sqlCommand(sql);
        const role = sqlRole(sql, 'mysql');
        // Clean-up (ROLLBACK, rollback(), UNLOCK TABLES, ...) is never refused, delayed or cut.
        if (role !== 'cleanup') return guarded(host, slot, owner, killer, original, this as MysqlConnection, args, deadline, ctx, outerSpan, method, role, verb);
      }
      return slot.passThrough(original, this, args);
    };
}

function guarded(
  host: ClientHost, slot: DriverSpanSlot, owner: object, killer: MysqlKiller, original: AnyFunction, connection: MysqlConnection,
  args: unknown[], deadline: Deadline, ctx: Context, outerSpan: Span | undefined, method: string, role: SqlRole, sqlVerb: string | undefined,
): unknown {
  const first = args[0] as string | MysqlCommand;
  const command = typeof first === 'object' && isFunction(first.onResult) ? first : undefined;
  const sql = typeof first === 'string' ? first : first.sql;
  const observe = host.settings.mode === 'observe';
  // `INSERT …; SELECT SLEEP(2)`: what ran before a cut is unknown, whatever the first word says.
  const several = connection.config?.multipleStatements === true && holdsSeveralStatements(sql, 'mysql');
  const statement = new DbStatement(deadline, observe, OPERATION, several ? true : undefined, sql);
  if (outerSpan !== undefined) statement.adoptSpan(outerSpan);
  const current = (connection as unknown as Record<string, unknown>)[method];
  const refusal = refusalFor(deadline, OPERATION, host.settings.minUsefulMs);
  if (needsOwnSpan(outerSpan, original, current, owner, refusal !== undefined)) {
    statement.startOwnSpan(host.tracer, ctx, mysqlSpanShape(connection, sqlVerb));
  }
  // (sql, cb), (sql, values, cb), or a command object carrying it (Pool#query).
  const index = isFunction(args[2]) ? 2 : isFunction(args[1]) ? 1 : -1;
  const given = (index >= 0 ? args[index] : command?.onResult) as NodeCallback | undefined;
  // mysql2 calls back from its socket's events: the callback runs in the caller's context.
  const callback = given === undefined ? undefined : context.bind(ctx, given);
  if (refusal !== undefined && !observe) {
    statement.refuse(refusal);
    if (callback === undefined) return original.apply(connection, args); // event-emitter use: not covered, documented
    const refuse = () => {
      deliver(callback, refusal);
      // Pool#query's command, which never reaches the driver: its pool connection is released on 'end'.
      command?.emit?.('end');
    };
    if (role === 'commit') {
      // Nothing of the transaction is committed and nothing stays open: it is rolled back before the caller hears.
      rollBack(connection as Parameters<typeof rollBack>[0], (clean) => {
        if (!clean) markTransactionUnknown(connection);
        refuse();
      });
      return command;
    }
    // A caller's own statement refused inside a transaction it may not roll back: its pool connection is, at release.
    if (command === undefined) markTransactionUnknown(connection);
    process.nextTick(refuse);
    return command;
  }
  if (refusal !== undefined) statement.markWouldReject();
  if (callback === undefined) {
    statement.settle();
    return original.apply(connection, args);
  }
  const call = new GuardedMysqlStatement(connection, statement, killer, callback, several);
  const callArgs = [...args];
  if (index >= 0) callArgs[index] = call.onResult;
  else command!.onResult = call.onResult;
  const result = slot.dispatch(statement, original, connection, callArgs) as MysqlCommand | undefined;
  call.command = result ?? command;
  call.settleBeforeDriver();
  statement.armFor(call);
  return result;
}

/** ER_QUERY_INTERRUPTED: what MariaDB/MySQL answers a statement `KILL QUERY` stopped. */
const ER_QUERY_INTERRUPTED = 1317;

interface MysqlCommand {
  sql?: unknown;
  emit?: (event: string) => unknown;
  onResult?: unknown;
  next?: unknown;
  start?: unknown;
}

interface MysqlConnection {
  threadId?: unknown;
  config?: { host?: unknown; port?: unknown; user?: unknown; database?: unknown; socketPath?: unknown; multipleStatements?: unknown };
  _command?: unknown;
  pause?: () => void;
  resume?: () => void;
  destroy?: () => void;
}

/** A statement stopped at the cutoff with `KILL QUERY`. Until the kill settles the connection is paused: it reads no answer, so nothing queued behind starts. */
class GuardedMysqlStatement extends CancelMachine {
  command: MysqlCommand | undefined;

  constructor(
    private readonly connection: MysqlConnection,
    statement: DbStatement,
    private readonly killer: MysqlKiller,
    private readonly callback: NodeCallback,
    private readonly several: boolean,
  ) {
    super(statement);
  }

  protected holdsSeveral(): boolean {
    return this.several;
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

  /** A kill that may still land ends the connection first: a queued command then fails, never reaching the server. */
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
