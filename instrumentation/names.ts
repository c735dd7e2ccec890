/** Names this instrumentation adds to the core's contract in src/attributes.ts. */

/** Observe mode: the call or request would have been aborted at its cutoff or by a disconnect. */
export const ATTR_DEADLINE_WOULD_ABORT = 'deadline.would_abort';
/** Observe mode: the call would have been refused, or the request rejected on arrival. */
export const ATTR_DEADLINE_WOULD_REJECT = 'deadline.would_reject';

/** Set to `1` on the early-reject reply of a server that refused a request for lack of time. */
export const HEADER_DEADLINE_EXPIRED = 'x-deadline-expired';

/** The instrumentation scope name of DeadlineInstrumentation's own spans. */
export const INSTRUMENTATION_NAME = 'otel-deadline/instrumentation';
/** Kept in step with package.json by hand: reading package.json at runtime would pull it into the build. */
export const INSTRUMENTATION_VERSION = '0.1.0';
