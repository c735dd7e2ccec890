import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import { suppressTracing } from '@opentelemetry/core';
import type { MethodPatch } from '../wrap';
import { CANCEL_BOUND_MS, type CancelResult } from './cancel-machine';
import { type AnyFunction, wrapWhereDefined } from './driver-call';

interface SessionConnection {
  query(sql: string, callback: (err: unknown, result?: unknown) => void): unknown;
  destroy(): void;
}

/** Runs `fn` as our own bookkeeping: judged by no deadline, traced under no request, wherever it was called from. */
function asBookkeeping(fn: () => void): void {
  context.with(suppressTracing(ROOT_CONTEXT), fn);
}

/** Connections whose transaction state a refused, skipped or cut statement left unknown: rolled back before going back to their pool, or destroyed. */
const unsure = new WeakSet<object>();
/** Pool connections whose release waits for that rollback: a second release() meanwhile is the same one. */
const releasing = new WeakSet<object>();

export function markTransactionUnknown(connection: object): void {
  unsure.add(connection);
}

/** Sends `ROLLBACK`; `done(true)` when the OK packet's SERVER_STATUS_IN_TRANS flag says no transaction is open. */
export function rollBack(connection: SessionConnection, done: (clean: boolean) => void): void {
  connection.query('ROLLBACK', (err, result) => {
    const status = (result as { serverStatus?: unknown } | null | undefined)?.serverStatus;
    done((err === null || err === undefined) && typeof status === 'number' && (status & 1) === 0);
  });
}

/** PoolConnection#release (lib/pool_connection.js): a connection in an unknown transaction state is rolled back first (see `unsure`). */
export function patchMysql2PoolConnection(PoolConnection: unknown, _host: unknown, _slot: unknown, owner: object, isActive: () => boolean): MethodPatch[] {
  const wrapRelease = (original: AnyFunction) =>
    function release(this: unknown, ...args: unknown[]): unknown {
      const connection = this as SessionConnection;
      if (releasing.has(connection)) return undefined;
      if (!unsure.has(connection)) return original.apply(connection, args);
      unsure.delete(connection);
      releasing.add(connection);
      asBookkeeping(() =>
        rollBack(connection, (clean) => {
          releasing.delete(connection);
          if (clean) original.apply(connection, args);
          else connection.destroy();
        }),
      );
      return undefined;
    };
  return wrapWhereDefined(PoolConnection, { release: wrapRelease }, owner, isActive);
}

/** An idle kill connection is closed after this long; the next cutoff opens a new one. */
const KILL_IDLE_MS = 5_000;

interface KillConnection {
  query(sql: string, callback: (err: unknown) => void): unknown;
  destroy(): void;
  once(event: string, listener: (err: unknown) => void): unknown;
  stream?: { unref?: () => void };
}

interface Killer {
  connection: KillConnection;
  pending: number;
  idle: ReturnType<typeof setTimeout> | undefined;
}

/** `KILL QUERY <thread id>` from a separate unref'd connection per server and user, opened on the first cutoff, closed when idle. */
export class MysqlKiller {
  private readonly killers = new Map<string, Killer>();

  constructor(private readonly Connection: new (opts: { config: unknown }) => KillConnection) {}

  /** `done` once: `told` when the server acknowledged the KILL, `unsettled` past CANCEL_BOUND_MS. Never throws. */
  kill(config: { host?: unknown; port?: unknown; user?: unknown; socketPath?: unknown }, threadId: unknown, done: (result: CancelResult) => void): void {
    if (!Number.isInteger(threadId)) return done('not_told');
    const key = `${String(config.socketPath ?? config.host)}:${String(config.port)}:${String(config.user)}`;
    let killer: Killer;
    try {
      killer = this.killers.get(key) ?? this.open(key, config);
    } catch {
      return done('not_told');
    }
    clearTimeout(killer.idle);
    killer.pending++;
    let finished = false;
    const finish = (result: CancelResult) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      killer.pending--;
      if (result !== 'told') this.drop(key, killer);
      else if (killer.pending === 0) {
        killer.idle = setTimeout(() => this.drop(key, killer), KILL_IDLE_MS);
        killer.idle.unref();
      }
      done(result);
    };
    const timer = setTimeout(() => finish('unsettled'), CANCEL_BOUND_MS);
    timer.unref();
    // It must run past the cutoff.
    asBookkeeping(() => killer.connection.query(`KILL QUERY ${threadId as number}`, (err) => finish(err === null || err === undefined ? 'told' : 'not_told')));
  }

  private open(key: string, config: unknown): Killer {
    const connection = new this.Connection({ config });
    connection.stream?.unref?.();
    const killer: Killer = { connection, pending: 0, idle: undefined };
    connection.once('error', () => this.drop(key, killer));
    this.killers.set(key, killer);
    return killer;
  }

  private drop(key: string, killer: Killer): void {
    clearTimeout(killer.idle);
    if (this.killers.get(key) === killer) this.killers.delete(key);
    killer.connection.destroy();
  }
}
