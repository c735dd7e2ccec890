import { CANCEL_CONNECTION_TIMEOUT_MS } from './pg-cancel';
import { destroyPgConnection, existingSessionOf, type PgSession } from './pg-session';
import type { PgClient, PgConnectCallback } from './pg-types';

type Release = (err?: unknown) => void;

/**
 * A pg-pool checkout's connect callback whose client comes with a guarded
 * release (`client.release` and the callback's third argument): a
 * connection our guards left something on goes back to the pool only clean.
 */
export function withGuardedRelease(callback: PgConnectCallback): PgConnectCallback {
  return (err, client, release) => {
    if (client === undefined || client === null || typeof release !== 'function') return callback(err, client, release);
    const guarded = guardedRelease(client, release);
    client.release = guarded;
    callback(err, client, guarded);
  };
}

/**
 * pg-pool's release for one checkout, for a connection on which a statement
 * of this checkout was refused or cut at its deadline. The connection goes
 * back to the pool only once every cut on it has settled (the statement has
 * ended and its cancel request has been answered), and only when the
 * server's own report of its transaction state (ReadyForQuery, read through
 * `getTransactionStatus()`) says idle: otherwise it is destroyed
 * (`release(true)`), never handed to another request in an open or aborted
 * transaction, or with a cancel in flight. A checkout nothing was cut on is
 * released as pg-pool would, whatever its state: that is the caller's.
 */
function guardedRelease(client: PgClient, release: Release): Release {
  let called = false;
  return function releaseClient(err?: unknown): void {
    const session = existingSessionOf(client);
    if (session === undefined || (!session.touched && session.settled)) return release(err);
    if (called) throw new Error('Release called on client which has already been released to the pool.');
    called = true;
    session.touched = false;
    if (err !== undefined && err !== null && err !== false) return release(err);
    if (session.settled) return release(fitForPool(client, session) ? undefined : true);
    const onSettled = () => {
      clearTimeout(bound);
      release(fitForPool(client, session) ? undefined : true);
    };
    // A bound, not a wait: the cancel request is bounded by the same time, a statement that runs on may not be.
    const bound = setTimeout(() => {
      session.forget(onSettled);
      destroyPgConnection(client, session);
      release(true);
    }, CANCEL_CONNECTION_TIMEOUT_MS);
    bound.unref();
    session.whenSettled(onSettled);
  };
}

/** Idle on the server and not ended by us; an unknown state (pg before `getTransactionStatus`) is not fit. */
function fitForPool(client: PgClient, session: PgSession): boolean {
  if (session.destroyed) return false;
  const status = typeof client.getTransactionStatus === 'function' ? client.getTransactionStatus() : undefined;
  return status === 'I';
}
