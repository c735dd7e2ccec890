import { defaultTextMapSetter, type Context } from '@opentelemetry/api';
import { DeadlinePropagator } from '../../src/propagation/DeadlinePropagator';
import { BAGGAGE_DEADLINE_KEY, HEADER_AT_MS, HEADER_BAGGAGE, HEADER_REMAINING_MS } from '../../src/attributes';
import { withDeadlineOnWire } from '../call/wire-context';
import { headerText, mergeBaggage } from '../call/baggage-text';
import { pairsOfList } from './strip-deadline';

/**
 * The one writer of the deadline headers on a guarded HTTP call: what our DeadlinePropagator writes in the
 * caller's context, whatever propagator is registered. The caller's values are replaced; baggage is merged.
 */

const propagator = new DeadlinePropagator();
const REPLACED = new Set([HEADER_REMAINING_MS, HEADER_AT_MS]);

export interface DeadlineHeaderValues {
  remaining: string;
  atMs: string;
  /** The context's baggage with the deadline entry, for a request that has no baggage header yet. */
  baggage: string;
}

/** The header values for a call made in `ctx`, or undefined when it has no deadline to send. */
export function deadlineHeaderValues(ctx: Context): DeadlineHeaderValues | undefined {
  const out: Record<string, string> = {};
  propagator.inject(withDeadlineOnWire(ctx), out, defaultTextMapSetter);
  const remaining = out[HEADER_REMAINING_MS];
  const atMs = out[HEADER_AT_MS];
  if (remaining === undefined || atMs === undefined) return undefined;
  return { remaining, atMs, baggage: out[HEADER_BAGGAGE] ?? `${BAGGAGE_DEADLINE_KEY}=${atMs}` };
}

/** `[name, value]` pairs with the deadline headers set: ours replace the caller's, and baggage is merged. */
function pairsWithDeadline(pairs: readonly [unknown, unknown][], values: DeadlineHeaderValues): [unknown, unknown][] {
  const out: [unknown, unknown][] = [];
  const baggage: string[] = [];
  for (const [name, value] of pairs) {
    const lower = typeof name === 'string' ? name.toLowerCase() : '';
    if (lower === HEADER_BAGGAGE) baggage.push(...headerText(value));
    else if (!REPLACED.has(lower)) out.push([name, value]);
  }
  out.push([HEADER_REMAINING_MS, values.remaining], [HEADER_AT_MS, values.atMs]);
  out.push([HEADER_BAGGAGE, baggage.length > 0 ? mergeBaggage(baggage, values.atMs) : values.baggage]);
  return out;
}

/** A call's `headers` option (object, flat list or iterable of pairs) with the deadline headers set, in the same form (pairs as a flat list). */
export function headersWithDeadline(headers: unknown, values: DeadlineHeaderValues): unknown {
  if (headers === undefined || headers === null) return Object.fromEntries(pairsWithDeadline([], values));
  if (Array.isArray(headers) && !Array.isArray(headers[0])) return pairsWithDeadline(pairsOfList(headers), values).flat();
  if (typeof (headers as Iterable<unknown>)[Symbol.iterator] === 'function') {
    return pairsWithDeadline([...(headers as Iterable<[unknown, unknown]>)], values).flat();
  }
  return Object.fromEntries(pairsWithDeadline(Object.entries(headers), values));
}

interface HeadersLike {
  get(name: string): string | null;
  set(name: string, value: string): void;
}

/** A fetch Headers built from the call's headers, with the deadline headers set. */
export function fetchHeadersWithDeadline<H extends HeadersLike>(headers: H, values: DeadlineHeaderValues): H {
  const baggage = headers.get(HEADER_BAGGAGE);
  headers.set(HEADER_REMAINING_MS, values.remaining);
  headers.set(HEADER_AT_MS, values.atMs);
  headers.set(HEADER_BAGGAGE, baggage === null ? values.baggage : mergeBaggage([baggage], values.atMs));
  return headers;
}

interface UndiciRequest {
  headers?: unknown;
  addHeader?(name: string, value: string): unknown;
}

/** Adds (undici's public `addHeader`) each deadline header a request lacks: one our wrappers never saw, or an interceptor rewrote. */
export function addMissingDeadlineHeaders(request: UndiciRequest, valuesFor: () => DeadlineHeaderValues | undefined): void {
  const list = request.headers;
  if (!Array.isArray(list) || typeof request.addHeader !== 'function') return;
  const present = new Set<string>();
  for (let i = 0; i < list.length; i += 2) present.add(String(list[i]).toLowerCase());
  if (present.has(HEADER_REMAINING_MS) && present.has(HEADER_AT_MS) && present.has(HEADER_BAGGAGE)) return;
  const values = valuesFor();
  if (values === undefined) return;
  if (!present.has(HEADER_REMAINING_MS)) request.addHeader(HEADER_REMAINING_MS, values.remaining);
  if (!present.has(HEADER_AT_MS)) request.addHeader(HEADER_AT_MS, values.atMs);
  if (!present.has(HEADER_BAGGAGE)) request.addHeader(HEADER_BAGGAGE, values.baggage);
}
