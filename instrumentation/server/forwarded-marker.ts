/**
 * The value a server puts in `x-deadline-expired` when a handler it ran
 * passes on a reply that carries the marker from the handler's own callee.
 *
 * `1` says "this server refused the request before running anything", and a
 * caller that believes it records `not_started`. Only the server that refused
 * may say that: once a handler has run here, work may have been done (a row
 * inserted), so what goes back to the caller must not claim otherwise. The
 * marker is restated rather than dropped: a deadline still ran out on the
 * way, so a retry helper that stops on `x-deadline-expired` (any value but
 * empty or `0`) still stops, while a client believes a refusal only for `1`.
 */
export const FORWARDED_MARKER_VALUE = 'downstream';
