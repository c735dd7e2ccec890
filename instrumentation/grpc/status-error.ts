import type { GrpcStatus } from './grpc-types';

/** The `Symbol.for` brands of src/errors.ts, recognised by their registry key rather than imported. */
const BRAND_PREFIX = 'otel-deadline.error.';

/**
 * Makes the error grpc-js builds from `status` (`Object.assign(new Error(...), status)`, which copies
 * enumerable own properties, symbols included) also one of ours: `isDeadlineError(err)` holds and
 * `err.cause` is `error`, while `err.code` stays the gRPC status code.
 */
export function markStatusWith(status: GrpcStatus, error: unknown): void {
  if (typeof error !== 'object' || error === null) return;
  Object.defineProperty(status, 'cause', { value: error, enumerable: true, configurable: true, writable: true });
  for (const symbol of Object.getOwnPropertySymbols(error)) {
    if (symbol.description?.startsWith(BRAND_PREFIX) !== true) continue;
    Object.defineProperty(status, symbol, { value: (error as Record<symbol, unknown>)[symbol], enumerable: true, configurable: true });
  }
}
