import { defaultTextMapSetter, propagation, type Context } from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';
import { getDeadline, isDeadlineOnlyBaggage, isWritingDeadlineHeaders, withDeadlineOnWire, withoutOutgoingCall } from '../../src/context';
import { DeadlinePropagator } from '../../src/propagation/DeadlinePropagator';
import { CutoffText, remainingText } from '../../src/propagation/cutoff-text';
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
const cutoffText = new CutoffText();
const REPLACED = new Set([HEADER_REMAINING_MS, HEADER_AT_MS]);
/** Names a later injector must not add again once ours are in (see guardUndiciRequest). */
export const DEADLINE_HEADER_NAMES: ReadonlySet<string> = new Set([HEADER_REMAINING_MS, HEADER_AT_MS, HEADER_BAGGAGE]);

interface DeadlineHeaderValues {
  remaining: string;
  atMs: string;
  /** The context's baggage with the deadline entry, for a request that has no baggage header yet. */
  baggage: string;
}

/** The header values for a call this package guards and has decided to send the deadline with (propagateTo). */
function valuesFor(ctx: Context): DeadlineHeaderValues | undefined {
  const onWire = withDeadlineOnWire(ctx);
  return deadlineOnlyValues(onWire) ?? injectedValues(onWire);
}

/**
 * The usual case, a context whose baggage holds nothing but the deadline (or
 * no baggage): the values straight from the deadline, what inject would
 * write, without going through a carrier. undefined for anything else.
 */
function deadlineOnlyValues(ctx: Context): DeadlineHeaderValues | undefined {
  if (isTracingSuppressed(ctx)) return undefined;
  const deadline = getDeadline(ctx);
  const bag = propagation.getBaggage(ctx);
  if (deadline === undefined || (bag !== undefined && !isDeadlineOnlyBaggage(bag))) return undefined;
  const text = cutoffText.of(deadline.expiresAtMs);
  return { remaining: remainingText(deadline), atMs: text.atMs, baggage: text.baggage };
}

/** The values inject writes for `onWire`, user baggage merged through the W3C codec. */
function injectedValues(onWire: Context): DeadlineHeaderValues | undefined {
  const out: Record<string, string> = {};
  // Asked from inside a dispatch whose guard put the headers in already, and found them missing: write them anyway.
  propagator.inject(isWritingDeadlineHeaders(onWire) ? withoutOutgoingCall(onWire) : onWire, out, defaultTextMapSetter);
  const remaining = out[HEADER_REMAINING_MS];
  const atMs = out[HEADER_AT_MS];
  if (remaining === undefined || atMs === undefined) return undefined;
  return { remaining, atMs, baggage: out[HEADER_BAGGAGE] ?? `${BAGGAGE_DEADLINE_KEY}=${atMs}` };
}

/** The key of one baggage member (`key=value;properties`). */
function baggageKeyOf(member: string): string {
  return member.split(/[=;]/, 1)[0].trim();
}

/** The members of baggage header values, without any deadline entry. */
function entriesWithoutDeadline(existing: readonly string[]): string[] {
  const entries: string[] = [];
  for (const value of existing) {
    for (const entry of value.split(',')) {
      const trimmed = entry.trim();
      if (trimmed.length === 0) continue;
      const key = baggageKeyOf(trimmed);
      if (key !== BAGGAGE_DEADLINE_KEY) entries.push(trimmed);
    }
  }
  return entries;
}

/** Joins baggage header values, dropping any earlier deadline entry and appending ours. */
export function mergeBaggage(existing: readonly string[], atMs: string): string {
  const entries = entriesWithoutDeadline(existing);
  entries.push(`${BAGGAGE_DEADLINE_KEY}=${atMs}`);
  return entries.join(',');
}

/**
 * node:http request headers (an object or a flat list) without the deadline
 * headers and without the deadline's baggage entry, for a call that must not
 * carry the deadline; `headers` itself when there is nothing to take out.
 */
export function headersWithoutDeadline(headers: unknown): unknown {
  const pairs: [unknown, unknown][] = [];
  if (Array.isArray(headers)) for (let i = 0; i + 1 < headers.length; i += 2) pairs.push([headers[i], headers[i + 1]]);
  else if (typeof headers === 'object' && headers !== null) pairs.push(...Object.entries(headers));
  if (!pairs.some(([name]) => deadlineNameOf(name) !== '')) return headers;
  const kept: [unknown, unknown][] = [];
  for (const [name, value] of pairs) {
    const lower = deadlineNameOf(name);
    if (REPLACED.has(lower)) continue;
    if (lower === HEADER_BAGGAGE) {
      const rest = entriesWithoutDeadline(headerText(value));
      if (rest.length > 0) kept.push([name, rest.join(',')]);
      continue;
    }
    kept.push([name, value]);
  }
  return Array.isArray(headers) ? kept.flat() : Object.fromEntries(kept);
}

/** A baggage header value without the deadline entry; undefined when nothing else was in it. */
export function baggageWithoutDeadline(value: unknown): string | undefined {
  const rest = entriesWithoutDeadline(headerText(value));
  return rest.length > 0 ? rest.join(',') : undefined;
}

/** True when a flat header list has a header named `lower` (in any case). */
export function hasHeader(list: unknown, lower: string): boolean {
  if (!Array.isArray(list)) return false;
  for (let i = 0; i < list.length; i += 2) if (String(list[i]).toLowerCase() === lower) return true;
  return false;
}

/**
 * Takes the deadline headers and the baggage entry out of a flat header list,
 * in place. Repeated baggage lines (a redirect hop's copy, then a propagator's
 * own) become one, first entry per key.
 */
export function stripDeadlineHeadersInList(list: unknown[]): void {
  const kept = headersWithoutDeadline(list) as unknown[];
  if (kept === list) return;
  list.length = 0;
  const baggage: string[] = [];
  let baggageAt = -1;
  for (let i = 0; i + 1 < kept.length; i += 2) {
    if (String(kept[i]).toLowerCase() === HEADER_BAGGAGE) {
      baggage.push(...headerText(kept[i + 1]));
      if (baggageAt >= 0) continue;
      baggageAt = list.length;
    }
    list.push(kept[i], kept[i + 1]);
  }
  if (baggage.length > 1) list[baggageAt + 1] = firstEntryPerKey(baggage);
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

/** undici's `opts.headers` (object, flat array or iterable of pairs) with the deadline headers set. */
export function undiciHeadersWithDeadline(headers: unknown, ctx: Context): unknown {
  if (headers === undefined || headers === null) return withDeadlineHeaders(undefined, ctx);
  if (Array.isArray(headers) && !Array.isArray(headers[0])) {
    const copy = [...headers];
    setDeadlineHeadersInList(copy, ctx);
    return copy;
  }
  if (typeof (headers as Iterable<unknown>)[Symbol.iterator] === 'function') {
    const flat: unknown[] = [];
    for (const pair of headers as Iterable<[unknown, unknown]>) flat.push(pair[0], pair[1]);
    setDeadlineHeadersInList(flat, ctx);
    return flat;
  }
  return withDeadlineHeaders(headers as Record<string, unknown>, ctx);
}

interface HeadersLike {
  get(name: string): string | null;
  set(name: string, value: string): void;
  delete(name: string): void;
}

/** A fetch Headers built from the call's headers with the deadline headers set, or undefined without a deadline. */
export function fetchHeadersWithDeadline<H extends HeadersLike>(make: () => H, ctx: Context): H | undefined {
  const values = valuesFor(ctx);
  if (values === undefined) return undefined;
  const headers = make();
  const baggage = headers.get(HEADER_BAGGAGE);
  headers.set(HEADER_REMAINING_MS, values.remaining);
  headers.set(HEADER_AT_MS, values.atMs);
  headers.set(HEADER_BAGGAGE, baggage === null ? values.baggage : mergeBaggage([baggage], values.atMs));
  return headers;
}

type UndiciRequestLike = { headers?: unknown };

/** Lengths of the deadline header names: most header names are skipped without lower-casing them. */
const NAME_LENGTHS = new Set([HEADER_REMAINING_MS.length, HEADER_AT_MS.length, HEADER_BAGGAGE.length]);

/** Lower-cased `name` if it can be one of the deadline header names (a string or a Buffer), else ''. */
function deadlineNameOf(name: unknown): string {
  const length = (name as { length?: unknown } | null | undefined)?.length;
  if (typeof length !== 'number' || !NAME_LENGTHS.has(length)) return '';
  // Already lower case, as our own writers put them: no new string.
  if (DEADLINE_HEADER_NAMES.has(name as string)) return name as string;
  const lower = String(name).toLowerCase();
  return DEADLINE_HEADER_NAMES.has(lower) ? lower : '';
}

/** True when `name` (any case) is one of the headers the deadline writes. */
export function isDeadlineHeaderName(name: unknown): boolean {
  return typeof name === 'string' && deadlineNameOf(name) !== '';
}

/** True for a baggage value whose only member is the deadline entry (what the propagator writes without user baggage). */
function isDeadlineOnlyBaggageValue(value: unknown): boolean {
  if (typeof value !== 'string' || value.includes(',')) return false;
  return baggageKeyOf(value) === BAGGAGE_DEADLINE_KEY;
}

function hasDeadlineBaggageEntry(value: unknown): boolean {
  return headerText(value).some((line) => line.split(',').some((member) => baggageKeyOf(member) === BAGGAGE_DEADLINE_KEY));
}

/**
 * True when appending `name: value` to a flat header list would only repeat a
 * deadline header the list already carries: an `x-deadline-*` header that is
 * there already, or a baggage line holding nothing but the deadline entry
 * when a baggage line with that entry is there already. Dropping such a
 * repeat as it is added leaves the list keepFirstDeadlineHeaders would make
 * of it afterwards (the first value wins), without rewriting the list.
 */
export function repeatsDeadlineHeader(list: unknown, name: unknown, value: unknown): boolean {
  const lower = deadlineNameOf(name);
  if (lower === '' || !Array.isArray(list)) return false;
  if (lower === HEADER_BAGGAGE && !isDeadlineOnlyBaggageValue(value)) return false;
  for (let i = 0; i + 1 < list.length; i += 2) {
    if (deadlineNameOf(list[i]) !== lower) continue;
    if (lower !== HEADER_BAGGAGE || hasDeadlineBaggageEntry(list[i + 1])) return true;
  }
  return false;
}

/**
 * Keeps the first value of each deadline header in a flat list, merging
 * repeated `baggage` lines (first entry per key wins). Returns whether the
 * list carried deadline headers at all.
 */
function keepFirstDeadlineHeaders(list: unknown[]): boolean {
  let remaining = 0;
  let atMs = 0;
  let baggageLines = 0;
  for (let i = 0; i < list.length; i += 2) {
    const lower = deadlineNameOf(list[i]);
    if (lower === HEADER_REMAINING_MS) remaining++;
    else if (lower === HEADER_AT_MS) atMs++;
    else if (lower === HEADER_BAGGAGE) baggageLines++;
  }
  if (remaining === 0) return false;
  // The usual case: each header once, nothing to rewrite.
  if (remaining === 1 && atMs <= 1 && baggageLines <= 1) return true;
  const seen = new Set<string>();
  const baggage: string[] = [];
  let baggageAt = -1;
  let write = 0;
  for (let read = 0; read + 1 < list.length; read += 2) {
    const name = list[read];
    const lower = typeof name === 'string' ? name.toLowerCase() : '';
    if (lower === HEADER_BAGGAGE) {
      baggage.push(...headerText(list[read + 1]));
      if (baggageAt >= 0) continue;
      baggageAt = write;
    } else if (REPLACED.has(lower)) {
      if (seen.has(lower)) continue;
      seen.add(lower);
    }
    list[write++] = name;
    list[write++] = list[read + 1];
  }
  list.length = write;
  if (baggageAt >= 0 && baggage.length > 1) list[baggageAt + 1] = firstEntryPerKey(baggage);
  return true;
}

function firstEntryPerKey(values: readonly string[]): string {
  const keys = new Set<string>();
  const entries: string[] = [];
  for (const value of values) {
    for (const entry of value.split(',')) {
      const trimmed = entry.trim();
      const key = baggageKeyOf(trimmed);
      if (trimmed.length === 0 || keys.has(key)) continue;
      keys.add(key);
      entries.push(trimmed);
    }
  }
  return entries.join(',');
}

/**
 * Runs in `undici:request:create` for every undici request (npm undici and
 * Node's bundled copy behind global fetch). Our wrappers have already put the
 * headers in the call's options, computed in the caller's context: those are
 * kept and duplicates appended by an instrumentation that ran earlier in the
 * channel are dropped. A request made some other way (dispatch, connect, a
 * fetch reference taken before we were enabled) gets them from `contextFor()`
 * here, if it returns one. Returns true when the request carries the deadline
 * headers: the caller then keeps later subscribers from adding them again
 * (undici's addHeader appends, it never replaces).
 */
export function settleUndiciRequestHeaders(request: UndiciRequestLike, contextFor: () => Context | undefined): boolean {
  if (!Array.isArray(request.headers)) return false;
  if (keepFirstDeadlineHeaders(request.headers)) return true;
  const ctx = contextFor();
  return ctx !== undefined && setDeadlineHeadersInList(request.headers, ctx);
}
