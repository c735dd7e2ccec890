import type { Context, Span } from '@opentelemetry/api';
import { contextApi } from '../../src/otel-api';
import type { Deadline } from '../../src/deadline';
import { budgetLeft, mayStart, refusalAt } from '../client/begin';
import type { ClientHost } from '../client/host';
import { isOwnWrapper, isShimmerWrapper, wrapMethod, type MethodPatch } from '../wrap';
import type { DbCancel } from './attributes';
import { statementDeadline } from './begin';
import { deliver, isFunction } from './deliver';
import { driverInstrumented, type DriverSpanSlot } from './driver-span';
import { CANCEL_GRACE_MS } from './pg-query';
import { MysqlKiller } from './mysql2-kill';
import { definerOf } from './definer';
import { isHandedOverUnguarded } from './handover';
import { patchMysql2Pool } from './mysql2-pool';
import { sqlCommand } from './sql';
import { DbStatement, type CutoffHandler, type SpanShape } from './statement';

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;
type Exports = Record<string, unknown>;
type Callback = (err: unknown, ...results: unknown[]) => void;

/** ER_QUERY_INTERRUPTED: what MariaDB/MySQL answers a statement `KILL QUERY` stopped. */
export const ER_QUERY_INTERRUPTED = 1317;
const OPERATION = 'mysql2.query';

interface MysqlCommand {
  sql?: unknown;
  emit?: (event: string) => unknown;
  onResult?: unknown;
  next?: unknown;
  start?: unknown;
}

interface MysqlConnection {
  query: unknown;
  threadId?: unknown;
  config?: { host?: unknown; port?: unknown; user?: unknown; database?: unknown; socketPath?: unknown };
  _command?: unknown;
}

function isInterrupted(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { errno?: unknown }).errno === ER_QUERY_INTERRUPTED;
}

/** instrumentation-mysql2's span name (the statement's command) and connection attributes; never the SQL text. */
function mysqlSpanShape(connection: MysqlConnection, command: string | undefined): SpanShape {
  const config = connection.config ?? {};
  const attributes: Record<string, string | number> = { 'db.system.name': 'mysql' };
  if (typeof config.database === 'string') attributes['db.namespace'] = config.database;
  if (typeof config.host === 'string') attributes['server.address'] = config.host;
  if (typeof config.port === 'number') attributes['server.port'] = config.port;
  if (command !== undefined) attributes['db.operation.name'] = command;
  return { name: command ?? 'mysql', attributes };
}

/** The patches for one loaded `mysql2` (its main module): query and execute on every connection, and the pool's wait for one. */
export function patchMysql2(moduleExports: Exports, host: ClientHost, slot: DriverSpanSlot, owner: object, isActive: () => boolean): MethodPatch[] {
  const exports = (moduleExports.Connection === undefined && typeof moduleExports.default === 'object' ? moduleExports.default : moduleExports) as Exports;
  return [...patchMysql2Connection(exports.Connection, host, slot, owner, isActive), ...patchMysql2Pool(exports.Pool, host, owner, isActive)];
}

/**
 * `query` and `execute` of mysql2's Connection class (lib/connection.js; pool
 * connections inherit them). Hooked as a file too: `mysql2/promise` never
 * loads the main module, so an app that only imports it is covered this way.
 */
export function patchMysql2Connection(Connection: unknown, host: ClientHost, slot: DriverSpanSlot, owner: object, isActive: () => boolean): MethodPatch[] {
  const connection = (Connection as { prototype?: Exports } | undefined)?.prototype;
  if (typeof Connection !== 'function' || connection === undefined) return [];
  const killer = new MysqlKiller(Connection as new (opts: { config: unknown }) => never);
  const patches: MethodPatch[] = [];
  for (const method of ['query', 'execute']) {
    const patch = wrapMethod(definerOf(connection, method), method, owner, isActive, makeStatementWrapper(host, slot, owner, killer, method));
    if (patch !== undefined) patches.push(patch);
  }
  return patches;
}


function makeStatementWrapper(host: ClientHost, slot: DriverSpanSlot, owner: object, killer: MysqlKiller, method: string) {
  return (original: AnyFunction): AnyFunction => {
    // An instrumentation-mysql2 registered before us wraps the method below ours: fixed for this wrapper's life.
    const instrumentedBelow = isShimmerWrapper(original);
    return function statement(this: unknown, ...args: unknown[]): unknown {
      // instrumentation-mysql2 has no requestHook: its span reaches the slot as it starts under a deadline.
      const outerSpan = slot.take(undefined);
      if (isHandedOverUnguarded(this)) return original.apply(this, args);
      const ctx = contextApi.active();
      const deadline = statementDeadline(host, 'mysql2', ctx);
      if (deadline === undefined || args[0] === null || args[0] === undefined) {
        return instrumentedBelow ? slot.passThrough(original, this, args) : original.apply(this, args);
      }
      return guarded(host, slot, owner, killer, original, this as MysqlConnection, args, deadline, ctx, outerSpan, method);
    };
  };
}

function guarded(
  host: ClientHost,
  slot: DriverSpanSlot,
  owner: object,
  killer: MysqlKiller,
  original: AnyFunction,
  connection: MysqlConnection,
  args: unknown[],
  deadline: Deadline,
  ctx: Context,
  outerSpan: Span | undefined,
  method: string,
): unknown {
  const first = args[0] as string | MysqlCommand;
  const command = typeof first === 'object' && isFunction(first.onResult) ? first : undefined;
  const sql = typeof first === 'string' ? first : first.sql;
  const observe = host.settings.mode === 'observe';
  const statement = new DbStatement(deadline, observe, OPERATION, undefined, sql);
  if (outerSpan !== undefined) statement.adoptSpan(outerSpan);
  const current = (connection as unknown as Record<string, unknown>)[method];
  // The one clock read before sending: refusal and arming both go by it.
  const left = budgetLeft(deadline);
  const minUsefulMs = host.settings.minUsefulMs;
  const refusal = mayStart(left, minUsefulMs) ? undefined : refusalAt(deadline, left, OPERATION, minUsefulMs);
  if (outerSpan === undefined && (!driverInstrumented(original, current, owner) || (refusal !== undefined && isOwnWrapper(current, owner)))) {
    statement.startOwnSpan(host.tracer, ctx, mysqlSpanShape(connection, sqlCommand(sql)));
  }
  // Find the caller's callback: (sql, cb), (sql, values, cb), or a command object carrying it (Pool#query).
  const index = isFunction(args[2]) ? 2 : isFunction(args[1]) ? 1 : -1;
  const callback = (index >= 0 ? args[index] : command?.onResult) as Callback | undefined;
  if (refusal !== undefined && !observe) {
    statement.refuse(refusal);
    if (callback === undefined) return original.apply(connection, args); // event-emitter use: not covered, documented
    process.nextTick(() => {
      deliver(callback, refusal);
      // Pool#query's command: its pool connection is released on 'end'. It never
      // reaches the driver (nor an instrumentation-mysql2 below us, whose span would never end).
      command?.emit?.('end');
    });
    return command;
  }
  if (refusal !== undefined) statement.markWouldReject();
  if (callback === undefined) {
    statement.settle();
    return original.apply(connection, args);
  }
  const call = new GuardedMysqlStatement(connection, statement, killer, callback);
  const callArgs = [...args];
  if (index >= 0) callArgs[index] = call.driverCallback;
  else command!.onResult = call.driverCallback;
  const result = slot.dispatch(statement, original, connection, callArgs) as MysqlCommand | undefined;
  call.command = result ?? command;
  call.settleFirst();
  statement.arm(call);
  return result;
}

class GuardedMysqlStatement implements CutoffHandler {
  command: MysqlCommand | undefined;
  private delivered = false;
  private kill: 'none' | 'pending' | 'told' | 'not_told' = 'none';
  private held: (() => void) | undefined;
  private grace: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly connection: MysqlConnection,
    private readonly statement: DbStatement,
    private readonly killer: MysqlKiller,
    private readonly callback: Callback,
  ) {}

  readonly driverCallback = (err: unknown, ...results: unknown[]): void => {
    if (this.delivered) return;
    if (this.kill === 'pending') {
      this.held = () => this.driverCallback(err, ...results);
      return;
    }
    this.delivered = true;
    clearTimeout(this.grace);
    const aborted = this.statement.aborted;
    this.settleFrom(err);
    if (!aborted || err === undefined || err === null) return deliver(this.callback, err, ...results);
    deliver(this.callback, isInterrupted(err) ? this.statement.errorFor(err) : err);
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
    if (isInterrupted(err)) return statement.settle(statement.errorFor(err), 'confirmed');
    statement.settle(err, this.kill === 'not_told' ? 'not_told' : 'unconfirmed');
  }

  onCutoff(): void {
    const { command, connection } = this;
    if (command !== undefined && command.next === null && connection._command !== command) {
      // Still queued on the connection: it will be skipped when its turn comes, never sent.
      command.start = () => null;
      return this.deliverEarly(undefined, false);
    }
    if (connection.config === undefined) return this.deliverEarly('not_told', true);
    this.kill = 'pending';
    this.grace = setTimeout(() => this.onGrace(), CANCEL_GRACE_MS);
    this.grace.unref();
    this.killer.kill(connection.config, connection.threadId, (told) => {
      this.kill = told ? 'told' : 'not_told';
      const held = this.held;
      this.held = undefined;
      if (held !== undefined) return held();
      if (!told) this.deliverEarly('not_told', true);
    });
  }

  /**
   * The KILL took too long: a result that already came is returned (the
   * statement finished, its span says so), otherwise the caller gets its error.
   */
  private onGrace(): void {
    const held = this.held;
    if (held === undefined) return this.deliverEarly(this.kill === 'told' ? 'unconfirmed' : 'not_told', true);
    this.held = undefined;
    this.kill = 'not_told';
    held();
  }

  private deliverEarly(cancel: DbCancel | undefined, sent: boolean): void {
    if (this.delivered) return;
    this.delivered = true;
    clearTimeout(this.grace);
    const error = this.statement.errorFor();
    this.statement.settle(error, cancel, sent);
    deliver(this.callback, error);
  }
}
