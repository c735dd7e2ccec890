import type { IncomingMessage } from 'node:http';
import type { InstrumentationConfig } from '@opentelemetry/instrumentation';

/**
 * `enforce` refuses, aborts and rejects; `observe` only records on spans what
 * enforce would have done (`deadline.would_reject`, `deadline.would_abort`).
 */
export type DeadlineMode = 'enforce' | 'observe';

/** What an outgoing call looks like to `ignoreOutgoingRequest`. */
export interface OutgoingRequestInfo {
  transport: 'fetch' | 'undici' | 'http' | 'grpc';
  /** The HTTP method; for gRPC the full method path, `/package.Service/Method`. */
  method: string;
  /** Full URL when known; for gRPC the channel's target. */
  url: string | undefined;
}

/** What an incoming gRPC call looks like to `trustIncomingGrpc`. */
export interface IncomingGrpcCallInfo {
  /** The full method path, `/package.Service/Method`. */
  path: string;
  /** The caller's address as grpc-js reports it. */
  peer: string;
  /** The call's metadata (a grpc-js Metadata). */
  metadata: { get(key: string): unknown[] };
}

/** What an early-reject reply looks like to `trustReply`. */
export interface ReplyInfo extends Omit<OutgoingRequestInfo, 'url'> {
  /** The URL that answered (after redirects, for fetch), when known; for gRPC the channel target's host, as an https: URL. */
  url: string | undefined;
  /** The HTTP status; for gRPC the gRPC status code (4, DEADLINE_EXCEEDED). */
  statusCode: number;
}

/**
 * Where deadline headers may go: host patterns (`api.internal`, `*.internal`,
 * `10.0.0.7:8080`, `[::1]`, `*`), or a function of each request's URL.
 */
export type PropagateTo = readonly string[] | ((url: URL) => boolean);

export interface DeadlineInstrumentationConfig extends InstrumentationConfig {
  /** Default `enforce`. */
  mode?: DeadlineMode;
  /** Outgoing calls are refused, and incoming requests rejected, when less than this many ms are left. Default 0. */
  minUsefulMs?: number;
  /** Caps the deadline an incoming request can ask for, in ms. Default: `defaultTimeoutMs` if set, else 100 days. */
  maxIncomingMs?: number;
  /** A deadline, in ms, for incoming requests that arrive without one. Default: none. */
  defaultTimeoutMs?: number;
  /** Whether to believe the deadline headers of this caller. Default: trust every caller. */
  trustIncoming?: (request: IncomingMessage) => boolean;
  /** Status code of the early-reject reply. Default 504. */
  rejectStatusCode?: number;
  /**
   * Where the `x-deadline-*` headers and the baggage entry `deadline.at_ms` are sent,
   * checked on every request and redirect hop. Calls to other hosts are still
   * refused and aborted at the cutoff, without the deadline. Default: every host.
   */
  propagateTo?: PropagateTo;
  /**
   * Whether to believe this peer's early-reject reply (`x-deadline-expired: 1`, status `rejectStatusCode`,
   * a well-formed body). Default: the hosts `propagateTo` allows (every peer without it). Throwing is "no".
   */
  trustReply?: (reply: ReplyInfo) => boolean;
  /** Calls for which this returns true are passed through untouched. */
  ignoreOutgoingRequest?: (info: OutgoingRequestInfo) => boolean;
  /** `false` passes every global `fetch` call through as if `ignoreOutgoingRequest` said so. Default true. */
  fetch?: boolean;
  /** The same for undici from npm: `request`, `stream`, `pipeline`, `fetch` and dispatchers. Default true. */
  undici?: boolean;
  /** The same for node:http and node:https clients (`request`, `get`). Default true. */
  httpClient?: boolean;
  /** `false` leaves node:http(s) servers alone: no deadline from the caller, no early reject. Default true. */
  httpServer?: boolean;
  /**
   * `false` leaves `pg` 8.x alone; else statements the deadline has no time for are
   * refused, pool waits cut, and statements in flight cancelled at the cutoff. Default true.
   */
  pg?: boolean;
  /** The same for `mysql2` 3.x (`KILL QUERY` at the cutoff). Default true. */
  mysql2?: boolean;
  /** The same for `ioredis` 5.x/6.x (blocking timeouts clamped to the budget). Default true. */
  ioredis?: boolean;
  /** `false` leaves @grpc/grpc-js alone: no client or server is touched. Default true. */
  grpc?: boolean;
  /**
   * Whether to believe the deadline of this gRPC caller. Default: trust every
   * caller, or, when `trustIncoming` is set, none until this hook says so.
   */
  trustIncomingGrpc?: (call: IncomingGrpcCallInfo) => boolean;
}
