/**
 * Parsers for incoming deadline header values: never throwing, each returns a
 * finite, non-negative number or `undefined`. Lengths are checked before any
 * (anchored, bounded) regex runs: a hostile 1 MiB value costs one length check.
 */

/** Longer header values are ignored outright. Enough for a few dozen comma-joined values. */
const MAX_HEADER_VALUE_LENGTH = 1024;
/** W3C baggage allows 8192 bytes in total, and so up to 180 members. */
const MAX_BAGGAGE_LENGTH = 8192;
const MAX_LIST_ITEMS = 32;

/** A constant: a regular expression literal in a function is a new object at each call. */
const GRPC_TIMEOUT = /^([0-9]{1,8})([HMSmun])$/;
const GRPC_UNIT_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 0.001, n: 0.000001 };

export type HeaderValue = string | string[] | undefined;

type ParseOne = (item: string) => number | undefined;

/**
 * The smallest valid item of a possibly multi-valued header, whose values a
 * proxy may have comma-joined: that can only shorten a budget, never extend
 * it. Bounded in length and count.
 */
export function smallest(raw: HeaderValue, parseOne: ParseOne, maxLength = MAX_HEADER_VALUE_LENGTH, maxItems = MAX_LIST_ITEMS): number | undefined {
  // Most headers asked for are absent (a gRPC getter's empty list), and most present ones hold one value (a one-item list): neither needs a list.
  if (raw === undefined || raw.length === 0) return undefined;
  const single: unknown = typeof raw === 'string' ? raw : raw.length === 1 ? raw[0] : undefined;
  if (typeof single === 'string') {
    // The length first: a hostile 1 MiB value is not even scanned for a comma.
    if (single.length > maxLength) return undefined;
    if (!single.includes(',')) return parseOne(single.trim());
  }
  const values: unknown[] = Array.isArray(raw) ? raw.slice(0, MAX_LIST_ITEMS) : [raw];
  let best: number | undefined;
  for (const value of values) {
    if (typeof value !== 'string' || value.length > maxLength) continue;
    for (const part of value.split(',', maxItems)) {
      const parsed = parseOne(part.trim());
      if (parsed !== undefined && (best === undefined || parsed < best)) best = parsed;
    }
  }
  return best;
}

/** 1 to 15 ASCII digits: always a safe integer, so summed digit by digit it is exact. */
export function parseIntegerMs(item: string): number | undefined {
  if (item.length === 0 || item.length > 15) return undefined;
  let value = 0;
  for (let i = 0; i < item.length; i++) {
    const digit = item.charCodeAt(i) - 48;
    if (digit < 0 || digit > 9) return undefined;
    value = value * 10 + digit;
  }
  return value;
}

/** gRPC's `grpc-timeout`: up to 8 digits and a unit (H, M, S, m, u, n). */
export function parseGrpcTimeout(item: string): number | undefined {
  const match = GRPC_TIMEOUT.exec(item);
  if (match === null) return undefined;
  return Number(match[1]) * GRPC_UNIT_MS[match[2]];
}

/** Reads `key=value` members of a W3C baggage header; the smallest valid value of `key` wins. */
export function smallestBaggageMs(raw: HeaderValue, key: string): number | undefined {
  const parseMember = (member: string) => {
    const eq = member.indexOf('=');
    // Baggage members may carry `;property` metadata after the value.
    if (eq < 0 || member.slice(0, eq).trim() !== key) return undefined;
    const end = member.indexOf(';', eq);
    return parseIntegerMs(member.slice(eq + 1, end < 0 ? undefined : end).trim());
  };
  return smallest(raw, parseMember, MAX_BAGGAGE_LENGTH, 180);
}
