import { context, type Context } from '@opentelemetry/api';
import { connect, type Socket } from 'node:net';
import { DeadlineCancelledError, DeadlineExceededError } from '../../src/errors';
import { CANCEL_BOUND_MS, type CancelResult } from './cancel-machine';

/** The parts of pg 8.x read here; the private ones are in docs/internals.md, checked by test/db/pg-internals.test.ts. */
export interface PgQuery {
  text?: unknown;
  callback?: unknown;
  submit?: unknown;
  handleError?: (err: unknown, connection: unknown) => void;
  handleReadyForQuery?: (connection: unknown) => void;
  /** pg-cursor: `idle` while suspended between reads. */
  state?: unknown;
  /** pg-query-stream, a Readable */
  destroy?: (err?: unknown) => void;
  readable?: unknown;
}

export interface PgClient {
  query: (...args: unknown[]) => unknown;
  connection: unknown;
  processID: unknown;
  secretKey: unknown;
  pipeline?: unknown;
  connectionParameters?: { host?: string; port?: number; database?: string; stream?: unknown };
  _queryQueue?: PgQuery[];
  _activeQuery?: PgQuery | null;
  _Promise?: PromiseConstructor;
  release?: (err?: unknown) => void;
  end?: () => unknown;
  /** The last ReadyForQuery's status byte ('I' idle). */
  getTransactionStatus?: () => unknown;
}

export type PgConnectCallback = (err: unknown, client?: PgClient, release?: (err?: unknown) => void) => void;

/** SQLSTATE query_canceled: the answer to a statement a cancel request stopped. */
export function isPgCancel(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === '57014';
}

/** The query pg is running on `client` now (`_activeQuery` on pg 8.12+, `activeQuery` before). */
export function activeQueryOf(client: PgClient): PgQuery | null | undefined {
  return '_activeQuery' in client ? client._activeQuery : (client as { activeQuery?: PgQuery | null }).activeQuery;
}

/** What our guards leave on a pg connection: unsettled cuts, and whether the checkout had a statement refused or cut. */
export class PgSession {
  private unsettled = 0;
  private waiters: (() => void)[] = [];
  touched = false;
  /** We ended the connection: a cancel to it might still arrive. */
  destroyed = false;

  get settled(): boolean {
    return this.unsettled === 0;
  }

  whenSettled(fn: () => void): void {
    if (this.unsettled === 0) return fn();
    this.waiters.push(fn);
  }

  forget(fn: () => void): void {
    const index = this.waiters.indexOf(fn);
    if (index >= 0) this.waiters.splice(index, 1);
  }

  /** One statement cut in flight: settled once it has ended and its cancel, if `cancelSent`, has settled. */
  openCut(cancelSent: boolean) {
    this.unsettled += 1;
    this.touched = true;
    let statementEnded = false;
    let cancelSettled = !cancelSent;
    let closed = false;
    const close = () => {
      if (closed || !statementEnded || !cancelSettled) return;
      closed = true;
      this.unsettled -= 1;
      if (this.unsettled === 0) for (const waiter of this.waiters.splice(0)) waiter();
    };
    return {
      statementEnd: () => ((statementEnded = true), close()),
      cancelEnd: () => ((cancelSettled = true), close()),
    };
  }
}

export type PgCut = ReturnType<PgSession['openCut']>;

const sessions = new WeakMap<object, PgSession>();

export function sessionOf(client: PgClient): PgSession {
  let session = sessions.get(client);
  if (session === undefined) sessions.set(client, (session = new PgSession()));
  return session;
}

/**
 * A Submittable put first in pg's queue when a running statement is cut; pg submits it once that statement has ended.
 * It sends a Sync only once the cancel has settled (a cancel that finds the backend idle is dropped), and its
 * ReadyForQuery lets pg go on to what queued meanwhile.
 */
export class CancelBarrier implements PgQuery {
  private connection: { sync?: () => void } | undefined = undefined;

  constructor(private readonly cut: PgCut, private open: boolean) {}

  submit(connection: unknown): void {
    this.connection = connection as { sync?: () => void };
    if (this.open) this.connection.sync?.();
  }

  release(): void {
    if (this.open) return;
    this.open = true;
    this.connection?.sync?.();
  }

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

/** Ends a connection that may still receive a cancel nobody can account for: nothing else ever runs on its backend. */
export function destroyPgConnection(client: PgClient): void {
  sessionOf(client).destroyed = true;
  try {
    (client.end?.call(client) as Promise<unknown> | undefined)?.catch?.(() => {});
  } catch {
    // already ended
  }
}

/** Sends a CancelRequest for `client`'s backend on a new connection, as libpq's PQcancel does; the server closes it once it has signalled the backend. Never throws. */
export function sendPgCancel(client: PgClient, done: (result: CancelResult) => void): void {
  const { processID, secretKey } = client;
  const params = client.connectionParameters ?? {};
  if (!Number.isInteger(processID) || !Number.isInteger(secretKey)) return done('not_told');
  let socket: Socket;
  let written = false;
  let finished = false;
  const finish = (closed: boolean) => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    socket.destroy();
    done(!written ? 'not_told' : closed ? 'told' : 'unsettled');
  };
  const host = params.host ?? 'localhost';
  const port = params.port ?? 5432;
  try {
    socket = host.startsWith('/') ? connect(`${host}/.s.PGSQL.${port}`) : connect(port, host);
  } catch {
    return done('not_told');
  }
  const timer = setTimeout(() => finish(false), CANCEL_BOUND_MS);
  timer.unref();
  socket.unref();
  socket.once('connect', () => {
    const message = Buffer.allocUnsafe(16);
    message.writeInt32BE(16, 0);
    message.writeInt32BE(80877102, 4); // CancelRequest code, 1234 << 16 | 5678
    message.writeInt32BE(processID as number, 8);
    message.writeInt32BE(secretKey as number, 12);
    socket.write(message, (err) => {
      if (err === undefined || err === null) written = true;
    });
  });
  socket.on('data', () => {}); // the server sends nothing back; keep the stream flowing to see its close
  // An error after the write (a reset instead of a close) leaves open whether the server read it.
  socket.once('error', () => finish(false));
  socket.once('close', () => finish(true));
}

type Release = (err?: unknown) => void;

/**
 * A pg-pool connect callback run in its caller's context `ctx` (pg-pool answers from wherever its queue moved on),
 * whose client comes with guardedRelease (`client.release` and the third argument).
 */
export function withGuardedRelease(callback: PgConnectCallback, ctx: Context): PgConnectCallback {
  return (err, client, release) => {
    if (client === undefined || client === null || typeof release !== 'function') return context.with(ctx, callback, undefined, err, client, release);
    const guarded = guardedRelease(client, release);
    client.release = guarded;
    context.with(ctx, callback, undefined, err, client, guarded);
  };
}

/**
 * pg-pool's release for a checkout on which a statement was refused or cut: the connection goes back once every cut on
 * it has settled and the server's transaction status says idle, else it is destroyed. A confirmed cancel (pg-pool's
 * query releases with that error) leaves it usable. Other checkouts are released as pg-pool would.
 */
function guardedRelease(client: PgClient, release: Release): Release {
  let called = false;
  return function releaseClient(err?: unknown): void {
    const session = sessions.get(client);
    if (session === undefined || (!session.touched && session.settled)) return release(err);
    if (called) throw new Error('Release called on client which has already been released to the pool.');
    called = true;
    session.touched = false;
    const confirmedCancel = (err instanceof DeadlineExceededError || err instanceof DeadlineCancelledError) && isPgCancel(err.cause);
    if (err !== undefined && err !== null && err !== false && !confirmedCancel) return release(err);
    const onSettled = () => {
      clearTimeout(bound);
      release(!session.destroyed && client.getTransactionStatus?.() === 'I' ? undefined : true);
    };
    // A bound, not a wait: the cancel request is bounded by the same time, a statement that runs on may not be.
    const bound = setTimeout(() => {
      session.forget(onSettled);
      destroyPgConnection(client);
      release(true);
    }, CANCEL_BOUND_MS);
    bound.unref();
    session.whenSettled(onSettled);
  };
}
