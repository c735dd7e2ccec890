import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import { suppressTracing } from '@opentelemetry/core';

/** How long a `KILL QUERY` may take, from opening the connection to the server's answer: a bound, not a wait. */
export const KILL_TIMEOUT_MS = 2_000;
/** An idle kill connection is closed after this long; the next cutoff opens a new one. */
const KILL_IDLE_MS = 5_000;

interface KillConnection {
  query(sql: string, callback: (err: unknown) => void): unknown;
  destroy(): void;
  once(event: string, listener: (err: unknown) => void): unknown;
  stream?: { unref?: () => void };
}

type ConnectionClass = new (opts: { config: unknown }) => KillConnection;

interface Killer {
  connection: KillConnection;
  pending: number;
  idle: ReturnType<typeof setTimeout> | undefined;
}

/**
 * `KILL QUERY <thread id>` from a separate connection: one per server and
 * user, opened on the first cutoff, reused by the following ones, closed
 * after a few idle seconds, its socket unref'd so it never keeps a process
 * alive. A statement killed this way ends with error 1317 and its own
 * connection stays usable.
 */
export class MysqlKiller {
  private readonly killers = new Map<string, Killer>();

  constructor(private readonly Connection: ConnectionClass) {}

  /** `done(true)` once the server acknowledged the KILL, `done(false)` if it could not be told. Never throws. */
  kill(config: { host?: unknown; port?: unknown; user?: unknown; socketPath?: unknown }, threadId: unknown, done: (told: boolean) => void): void {
    if (!Number.isInteger(threadId)) return done(false);
    const key = `${String(config.socketPath ?? config.host)}:${String(config.port)}:${String(config.user)}`;
    let killer: Killer;
    try {
      killer = this.killers.get(key) ?? this.open(key, config);
    } catch {
      return done(false);
    }
    clearTimeout(killer.idle);
    killer.pending++;
    let finished = false;
    const finish = (told: boolean) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      killer.pending--;
      if (!told) this.drop(key, killer);
      else this.idleLater(key, killer);
      done(told);
    };
    const timer = setTimeout(() => finish(false), KILL_TIMEOUT_MS);
    timer.unref();
    // Never guarded, never traced: it is our own bookkeeping, and it must run past the cutoff.
    context.with(suppressTracing(ROOT_CONTEXT), () =>
      killer.connection.query(`KILL QUERY ${threadId as number}`, (err) => finish(err === null || err === undefined)),
    );
  }

  private open(key: string, config: unknown): Killer {
    const connection = new this.Connection({ config });
    connection.stream?.unref?.();
    const killer: Killer = { connection, pending: 0, idle: undefined };
    connection.once('error', () => this.drop(key, killer));
    this.killers.set(key, killer);
    return killer;
  }

  private idleLater(key: string, killer: Killer): void {
    if (killer.pending > 0) return;
    killer.idle = setTimeout(() => this.drop(key, killer), KILL_IDLE_MS);
    killer.idle.unref();
  }

  private drop(key: string, killer: Killer): void {
    clearTimeout(killer.idle);
    if (this.killers.get(key) === killer) this.killers.delete(key);
    killer.connection.destroy();
  }
}
