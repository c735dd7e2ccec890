import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { HEADER_DEADLINE_EXPIRED } from '../names';

/**
 * The value a server puts in `x-deadline-expired` when a handler it ran passes on a reply that carries the
 * marker from its own callee. `1` says "this server refused before running anything", which only the server
 * that refused may say: once a handler has run here, work may have been done. Restated rather than dropped,
 * a retry helper that stops on the marker (any value but empty or `0`) still stops.
 */
export const FORWARDED_MARKER_VALUE = 'downstream';

type HeaderList = OutgoingHttpHeaders | readonly unknown[];

function isMarker(name: unknown): boolean {
  return typeof name === 'string' && name.toLowerCase() === HEADER_DEADLINE_EXPIRED;
}

/** `headers` as writeHead takes them (an object, a flat [name, value, ...] list, or [name, value] pairs), marker restated. */
function restatedHeaders(headers: HeaderList): HeaderList {
  if (!Array.isArray(headers)) {
    const names = Object.keys(headers).filter(isMarker);
    if (names.length === 0) return headers;
    const copy = { ...(headers as OutgoingHttpHeaders) };
    for (const name of names) copy[name] = FORWARDED_MARKER_VALUE;
    return copy;
  }
  if (headers.length > 0 && Array.isArray(headers[0])) {
    return headers.map((pair) => (Array.isArray(pair) && isMarker(pair[0]) ? [pair[0], FORWARDED_MARKER_VALUE] : pair));
  }
  return headers.map((item, i) => (i % 2 === 1 && isMarker(headers[i - 1]) ? FORWARDED_MARKER_VALUE : item));
}

/**
 * For a request whose listeners run: `x-deadline-expired` goes out restated, set through `setHeader` or
 * passed to `writeHead`. Every header block passes through `writeHead` (node:http calls it for implicit
 * headers too), wrapped on this response only, as `on-headers` does.
 */
export function restateForwardedMarkers(response: ServerResponse): void {
  const writeHead = response.writeHead;
  response.writeHead = function (this: ServerResponse, ...args: unknown[]) {
    if (!this.headersSent && this.hasHeader(HEADER_DEADLINE_EXPIRED)) this.setHeader(HEADER_DEADLINE_EXPIRED, FORWARDED_MARKER_VALUE);
    const last = args.length - 1;
    if (last >= 1 && typeof args[last] === 'object' && args[last] !== null) args[last] = restatedHeaders(args[last] as HeaderList);
    return (writeHead as (...all: unknown[]) => ServerResponse).apply(this, args);
  } as ServerResponse['writeHead'];
}
