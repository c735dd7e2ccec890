/**
 * The parts of pg 8.x this instrumentation reads. Typed here rather than
 * imported: pg is not a dependency, and some of these fields are pg's own
 * internals (queues, active query), checked by the tests on the pg 8 line.
 */
export type PgCallback = (err: unknown, result?: unknown) => void;

export interface PgQuery {
  text?: unknown;
  callback?: unknown;
  submit?: unknown;
  handleError?: (err: unknown, connection: unknown) => void;
  handleReadyForQuery?: (connection: unknown) => void;
  /** pg-cursor: `busy` while rows are being fetched, `idle` while suspended between reads. */
  state?: unknown;
  /** pg-query-stream (a Readable) */
  destroy?: (err?: unknown) => void;
  readable?: unknown;
}

export interface PgClient {
  query: (...args: unknown[]) => unknown;
  connection: unknown;
  processID: unknown;
  secretKey: unknown;
  pipeline?: unknown;
  database?: unknown;
  connectionParameters?: { host?: string; port?: number; database?: string; stream?: unknown };
  _queryQueue?: PgQuery[];
  _activeQuery?: PgQuery | null;
  _Promise?: PromiseConstructor;
  once(event: string, listener: (err: unknown) => void): unknown;
  removeListener(event: string, listener: (err: unknown) => void): unknown;
  release?: (err?: unknown) => void;
  /** Newer pg 8.x: the status byte of the last ReadyForQuery ('I' idle, 'T' in a transaction, 'E' in a failed one). */
  getTransactionStatus?: () => unknown;
}

export interface PgPool {
  ending?: unknown;
  Promise?: PromiseConstructor;
  options?: { host?: string; port?: number; database?: string };
  _pendingQueue?: { timedOut?: boolean }[];
  connect: (callback?: PgConnectCallback) => unknown;
}

export type PgConnectCallback = (err: unknown, client?: PgClient, release?: (err?: unknown) => void) => void;

/** SQLSTATE query_canceled: what PostgreSQL answers a statement its cancel request stopped. */
export const PG_QUERY_CANCELED = '57014';

export function isPgCancel(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === PG_QUERY_CANCELED;
}

/** The query pg is running on `client` now (`_activeQuery` on pg 8.12+, `activeQuery` before). */
export function activeQueryOf(client: PgClient): PgQuery | null | undefined {
  return '_activeQuery' in client ? client._activeQuery : (client as { activeQuery?: PgQuery | null }).activeQuery;
}
