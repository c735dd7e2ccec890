import { BAGGAGE_DEADLINE_KEY } from '../../src/attributes';

/** The `baggage` header as text: the deadline entry taken out of it, or merged into it. */

/** A header value (one string, a list, or nothing) as a list of strings. */
export function headerText(value: unknown): string[] {
  if (Array.isArray(value)) return value.map(String);
  return value === undefined || value === null ? [] : [String(value)];
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
      if (trimmed.length > 0 && baggageKeyOf(trimmed) !== BAGGAGE_DEADLINE_KEY) entries.push(trimmed);
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

/** A baggage header value without the deadline entry; undefined when nothing else was in it. */
export function baggageWithoutDeadline(value: unknown): string | undefined {
  const rest = entriesWithoutDeadline(headerText(value));
  return rest.length > 0 ? rest.join(',') : undefined;
}
