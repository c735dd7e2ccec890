import type { IncomingMessage } from 'node:http';
import type { InstrumentationConfig } from '@opentelemetry/instrumentation';

/**
 * `enforce` refuses, aborts and rejects; `observe` only records on spans what
 * enforce would have done (`deadline.would_reject`, `deadline.would_abort`).
 */
export type DeadlineMode = 'enforce' | 'observe';

/** What an outgoing call looks like to `ignoreOutgoingRequest`. */
export interface OutgoingRequestInfo {
  transport: 'fetch' | 'undici' | 'http';
  method: string;
  /** Full URL when known. */
  url: string | undefined;
}

export interface DeadlineInstrumentationConfig extends InstrumentationConfig {
  /** Default `enforce`. */
  mode?: DeadlineMode;
  /**
   * Outgoing calls are refused when less than this many ms are left, and
   * incoming requests are rejected early on the same rule. Default 0.
   */
  minUsefulMs?: number;
  /**
   * Caps the deadline an incoming request can ask for, in ms. Default:
   * `defaultTimeoutMs` when that is set (a caller may ask for less, never
   * more), else MAX_DEADLINE_MS (100 days).
   */
  maxIncomingMs?: number;
  /** A deadline, in ms, for incoming requests that arrive without one. Default: none. */
  defaultTimeoutMs?: number;
  /** Whether to believe the deadline headers of this caller. Default: trust every caller. */
  trustIncoming?: (request: IncomingMessage) => boolean;
  /** Status code of the early-reject reply. Default 504. */
  rejectStatusCode?: number;
  /** Calls for which this returns true are passed through untouched. */
  ignoreOutgoingRequest?: (info: OutgoingRequestInfo) => boolean;
}
