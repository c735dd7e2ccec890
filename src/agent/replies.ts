// The transport instrumentation's early reject sets this header; a retry must never repeat such a call.
import { HEADER_DEADLINE_EXPIRED } from '../attributes';

/**
 * Reads, without throwing, why a call failed: a deadline code (on the error or a
 * cause), an HTTP status, the `x-deadline-expired` header. Shapes: fetch
 * `Response`, undici errors, node:http `IncomingMessage`, any error with a `code`.
 */

const MAX_DEPTH = 5;
const DEADLINE_CODES = new Set(['DEADLINE_EXCEEDED', 'INSUFFICIENT_BUDGET', 'CANCELLED']);

function asObject(value: unknown): Record<string, unknown> | undefined {
  return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined;
}

/** The value, its `response`/`res`, then its cause, and so on, bounded. */
function* related(value: unknown): Generator<Record<string, unknown>> {
  let current = asObject(value);
  for (let depth = 0; current !== undefined && depth < MAX_DEPTH; depth++) {
    yield current;
    const response = asObject(current.response) ?? asObject(current.res);
    if (response !== undefined) yield response;
    current = asObject(current.cause);
  }
}

function headerOf(headers: unknown, name: string): string | undefined {
  const bag = asObject(headers);
  if (bag === undefined) return undefined;
  try {
    const value = typeof bag.get === 'function' ? (bag.get as (n: string) => unknown)(name) : bag[name];
    if (typeof value === 'string') return value;
    if (Array.isArray(value) && typeof value[0] === 'string') return value[0];
  } catch {
    // A hostile or broken headers object is treated as carrying nothing.
  }
  return undefined;
}

function statusOf(candidate: Record<string, unknown>): unknown {
  try {
    return candidate.status ?? candidate.statusCode;
  } catch {
    return undefined;
  }
}

/** True when a non-2xx reply on the error carries `x-deadline-expired` (any value but empty or `0`). */
export function carriesDeadlineExpired(err: unknown): boolean {
  for (const candidate of related(err)) {
    // `metadata`: the trailers of a grpc-js error, which carry the marker as gRPC metadata.
    const value = headerOf(candidate.headers ?? candidate.metadata, HEADER_DEADLINE_EXPIRED);
    if (value === undefined || value === '' || value === '0') continue;
    const status = statusOf(candidate);
    if (typeof status === 'number' && status >= 200 && status < 300) continue;
    return true;
  }
  return false;
}

/** `DEADLINE_EXCEEDED`, `INSUFFICIENT_BUDGET` or `CANCELLED` when the error or a cause has that code. */
export function deadlineCodeOf(err: unknown): string | undefined {
  for (const candidate of related(err)) {
    const code = candidate.code;
    if (typeof code === 'string' && DEADLINE_CODES.has(code)) return code;
  }
  return undefined;
}

/** The HTTP status the error exposes (`status` or `statusCode`, on it or its response), if any. */
export function httpStatusOf(err: unknown): number | undefined {
  for (const candidate of related(err)) {
    const status = candidate.status ?? candidate.statusCode;
    if (typeof status === 'number' && Number.isInteger(status) && status >= 100 && status <= 599) return status;
  }
  return undefined;
}
