import { connect, type Socket } from 'node:net';

/** PostgreSQL's CancelRequest code (1234 << 16 | 5678), protocol 3.0. */
const CANCEL_REQUEST_CODE = 80877102;
/** How long the cancel connection may take, from connect to the server closing it: a bound, not a wait. */
export const CANCEL_CONNECTION_TIMEOUT_MS = 2_000;

export interface PgCancelTarget {
  host: string | undefined;
  port: number | undefined;
  processID: unknown;
  secretKey: unknown;
}

/**
 * Sends the protocol's CancelRequest for one backend on a new connection, as
 * libpq's PQcancel and pg's `Client#cancel` do, and reports whether the
 * server was told. Like PQcancel it waits for the server to close the
 * connection: PostgreSQL closes it once it has signalled the backend, so a
 * statement sent after that cannot be hit by this cancel.
 *
 * `done(true)` once the request was written and the server closed the
 * connection; `done(false)` when it could not be delivered (no key, connect
 * error, timeout before the write). Never throws; the socket never outlives it.
 */
export function sendPgCancel(target: PgCancelTarget, done: (told: boolean) => void): void {
  const { processID, secretKey } = target;
  if (!Number.isInteger(processID) || !Number.isInteger(secretKey)) return done(false);
  let socket: Socket;
  let written = false;
  let finished = false;
  const finish = (told: boolean) => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    socket.destroy();
    done(told);
  };
  const host = target.host ?? 'localhost';
  try {
    socket = host.startsWith('/') ? connect(`${host}/.s.PGSQL.${target.port ?? 5432}`) : connect(target.port ?? 5432, host);
  } catch {
    return done(false);
  }
  const timer = setTimeout(() => finish(written), CANCEL_CONNECTION_TIMEOUT_MS);
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
  socket.once('error', () => finish(written));
  socket.once('close', () => finish(written));
}
