import { HEADER_AT_MS, HEADER_BAGGAGE, HEADER_REMAINING_MS } from '../../src/attributes';
import { baggageWithoutDeadline } from '../call/baggage-text';

/** Takes the deadline out of a call to a host off `propagateTo`, whoever put it in (the caller, an outer http instrumentation, a redirect's first hop). */

/** `[name, value]` pairs without the deadline headers and without the deadline's baggage entry. */
function pairsWithoutDeadline(pairs: readonly [unknown, unknown][]): [unknown, unknown][] {
  const kept: [unknown, unknown][] = [];
  for (const [name, value] of pairs) {
    const lower = String(name).toLowerCase();
    if (lower === HEADER_REMAINING_MS || lower === HEADER_AT_MS) continue;
    if (lower !== HEADER_BAGGAGE) kept.push([name, value]);
    else {
      const rest = baggageWithoutDeadline(value);
      if (rest !== undefined) kept.push([name, rest]);
    }
  }
  return kept;
}

/** A flat `[name, value, ...]` header list as pairs. */
export function pairsOfList(list: readonly unknown[]): [unknown, unknown][] {
  const pairs: [unknown, unknown][] = [];
  for (let i = 0; i + 1 < list.length; i += 2) pairs.push([list[i], list[i + 1]]);
  return pairs;
}

/** node:http request headers (an object or a flat list) without the deadline. */
export function headersWithoutDeadline(headers: unknown): unknown {
  if (Array.isArray(headers)) return pairsWithoutDeadline(pairsOfList(headers)).flat();
  return typeof headers === 'object' && headers !== null ? Object.fromEntries(pairsWithoutDeadline(Object.entries(headers))) : headers;
}

/** Takes the deadline out of an undici request's header list, in place: undici has no public way to remove one (docs/internals.md). */
export function stripDeadlineHeadersInList(list: unknown[]): void {
  const kept = pairsWithoutDeadline(pairsOfList(list)).flat();
  list.length = 0;
  list.push(...kept);
}
