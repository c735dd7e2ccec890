import { defaultTextMapSetter, type Context } from '@opentelemetry/api';
import { DeadlinePropagator } from '../../src/propagation/DeadlinePropagator';
import { BAGGAGE_DEADLINE_KEY, HEADER_AT_MS, HEADER_BAGGAGE, HEADER_REMAINING_MS } from '../../src/attributes';

/**
 * Writes the deadline headers exactly once per request.
 *
 * We inject with our own DeadlinePropagator rather than the global one, so the
 * headers go out whatever propagator the application registered. Values
 * already present under our names (from the caller, or from an http/undici
 * instrumentation injecting through a global propagator that includes the
 * deadline propagator) are replaced, and an existing `baggage` header keeps
 * its entries with ours merged in. Names are compared case-insensitively.
 */

const propagator = new DeadlinePropagator();
const REPLACED = new Set([HEADER_REMAINING_MS, HEADER_AT_MS]);
/** Names a later injector must not add again once ours are in (see guardUndiciRequest). */
export const DEADLINE_HEADER_NAMES: ReadonlySet<string> = new Set([HEADER_REMAINING_MS, HEADER_AT_MS, HEADER_BAGGAGE]);

interface DeadlineHeaderValues {
  remaining: string;
  atMs: string;
  /** The context's baggage with the deadline entry, for a request that has no baggage header yet. */
  baggage: string;
}

function valuesFor(ctx: Context): DeadlineHeaderValues | undefined {
  const out: Record<string, string> = {};
  propagator.inject(ctx, out, defaultTextMapSetter);
  const remaining = out[HEADER_REMAINING_MS];
  const atMs = out[HEADER_AT_MS];
  if (remaining === undefined || atMs === undefined) return undefined;
  return { remaining, atMs, baggage: out[HEADER_BAGGAGE] ?? `${BAGGAGE_DEADLINE_KEY}=${atMs}` };
}

/** Joins baggage header values, dropping any earlier deadline entry and appending ours. */
export function mergeBaggage(existing: readonly string[], atMs: string): string {
  const entries: string[] = [];
  for (const value of existing) {
    for (const entry of value.split(',')) {
      const trimmed = entry.trim();
      if (trimmed.length === 0) continue;
      const key = trimmed.split(/[=;]/, 1)[0].trim();
      if (key !== BAGGAGE_DEADLINE_KEY) entries.push(trimmed);
    }
  }
  entries.push(`${BAGGAGE_DEADLINE_KEY}=${atMs}`);
  return entries.join(',');
}

function headerText(value: unknown): string[] {
  if (Array.isArray(value)) return value.map(String);
  return value === undefined || value === null ? [] : [String(value)];
}

/** A copy of a node:http headers object with the deadline headers set. */
export function withDeadlineHeaders(headers: Record<string, unknown> | undefined, ctx: Context): Record<string, unknown> | undefined {
  const values = valuesFor(ctx);
  if (values === undefined) return headers;
  const out: Record<string, unknown> = {};
  const baggage: string[] = [];
  for (const [name, value] of Object.entries(headers ?? {})) {
    const lower = name.toLowerCase();
    if (REPLACED.has(lower)) continue;
    if (lower === HEADER_BAGGAGE) baggage.push(...headerText(value));
    else out[name] = value;
  }
  out[HEADER_REMAINING_MS] = values.remaining;
  out[HEADER_AT_MS] = values.atMs;
  out[HEADER_BAGGAGE] = baggage.length > 0 ? mergeBaggage(baggage, values.atMs) : values.baggage;
  return out;
}

/**
 * Sets the deadline headers in a flat `[name, value, name, value, ...]` list,
 * in place: undici's request.headers, or node:http's raw header array.
 */
export function setDeadlineHeadersInList(list: unknown[], ctx: Context): boolean {
  const values = valuesFor(ctx);
  if (values === undefined) return false;
  const baggage: string[] = [];
  let write = 0;
  for (let read = 0; read + 1 < list.length; read += 2) {
    const name = list[read];
    const lower = typeof name === 'string' ? name.toLowerCase() : '';
    if (REPLACED.has(lower)) continue;
    if (lower === HEADER_BAGGAGE) {
      baggage.push(...headerText(list[read + 1]));
      continue;
    }
    list[write++] = name;
    list[write++] = list[read + 1];
  }
  list.length = write;
  list.push(HEADER_REMAINING_MS, values.remaining, HEADER_AT_MS, values.atMs);
  list.push(HEADER_BAGGAGE, baggage.length > 0 ? mergeBaggage(baggage, values.atMs) : values.baggage);
  return true;
}

type UndiciRequestLike = { headers?: unknown; addHeader?: (name: string, value: unknown) => unknown };

/**
 * Sets the deadline headers on an undici request (from `undici:request:create`)
 * and stops anything that runs after us in the same channel from adding them
 * a second time: undici's addHeader appends, it never replaces.
 */
export function setUndiciRequestHeaders(request: UndiciRequestLike, ctx: Context): void {
  if (!Array.isArray(request.headers)) return;
  if (!setDeadlineHeadersInList(request.headers, ctx)) return;
  const addHeader = request.addHeader;
  if (typeof addHeader !== 'function') return;
  Object.defineProperty(request, 'addHeader', {
    configurable: true,
    writable: true,
    value(this: UndiciRequestLike, name: string, value: unknown) {
      if (typeof name === 'string' && DEADLINE_HEADER_NAMES.has(name.toLowerCase())) return this;
      return addHeader.call(this, name, value);
    },
  });
}
