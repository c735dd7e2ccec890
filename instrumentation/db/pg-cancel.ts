import { connect, type Socket } from 'node:net';

/** PostgreSQL's CancelRequest code (1234 << 16 | 5678), protocol 3.0. */
const CANCEL_REQUEST_CODE = 80877102;
/** How long the cancel connection may take, from connect to the server closing it: a bound, not a wait. */
export const CANCEL_CONNECTION_TIMEOUT_MS = 2_000;

/**
 * What became of a cancel request: `told`, the server closed the cancel
 * connection after signalling the backend; `not_told`, nothing reached the
 * server (no key, connect error, not written); `unsettled`, it was written
 * but the server did not close the connection within the bound, so it may
 * still arrive and stop whatever the backend runs then.
 */
export type PgCancelResult = 'told' | 'not_told' | 'unsettled';

export interface PgCancelTarget {
  host: string | undefined;
  port: number | undefined;
  processID: unknown;
  secretKey: unknown;
}

/**
 * Sends the protocol's CancelRequest for one backend on a new connection, as
 * libpq's PQcancel and pg's `Client#cancel` do, and reports whether the
 * server was told (PgCancelResult). Like PQcancel it waits for the server to
 * close the connection: PostgreSQL closes it once it has signalled the
 * backend, so a statement sent after that cannot be hit by this cancel.
 * Never throws; the socket never outlives it.
 */
export function sendPgCancel(target: PgCancelTarget, done: (result: PgCancelResult) => void): void {
  const { processID, secretKey } = target;
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
  const host = target.host ?? 'localhost';
  try {
    socket = host.startsWith('/') ? connect(`${host}/.s.PGSQL.${target.port ?? 5432}`) : connect(target.port ?? 5432, host);
  } catch {
    return done('not_told');
  }
  const timer = setTimeout(() => finish(false), CANCEL_CONNECTION_TIMEOUT_MS);
  timer.unref();
  socket.unref();
  socket.once('connect', () => {
    const message = Buffer.allocUnsafe(16);
    message.writeInt32BE(16, 0);
    message.writeInt32BE(CANCEL_REQUEST_CODE, 4);
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
