/**
 * Host allowlists (`propagateTo`): which peers get the deadline headers and,
 * by default, whose early-reject replies are believed. A pattern is `*`, a host
 * name or IP (`api.internal`, `10.0.0.7`, `[::1]`), or `*.suffix` (names under
 * `suffix`, not itself), each with an optional `:port` (a URL without one has
 * its scheme's default). Names compare case-insensitively.
 */

/** What a compiled list is asked about: the URL of one request (one redirect hop). */
export type HostMatcher = (url: string | URL | undefined) => boolean;

interface Pattern {
  /** Exact lower-cased host name, or the suffix (with its leading dot) for a wildcard. */
  host: string;
  wildcard: boolean;
  any: boolean;
  port: number | undefined;
}

// Host names, IPv4 and bracketed IPv6 literals; no scheme, path or credentials.
const PATTERN = /^(\*|\*\.[a-z0-9_.-]+|[a-z0-9_.-]+|\[[0-9a-f:.]+\])(?::(\d{1,5}))?$/;
const DEFAULT_PORTS: Record<string, number> = { 'http:': 80, 'https:': 443, 'ws:': 80, 'wss:': 443 };

function parsePattern(text: string): Pattern {
  const lower = text.trim().toLowerCase();
  const match = PATTERN.exec(lower);
  const port = match?.[2] === undefined ? undefined : Number(match[2]);
  if (match === null || (port !== undefined && (port < 1 || port > 65_535))) {
    throw new TypeError(`not a host pattern: ${JSON.stringify(text.slice(0, 64))} (expected host, *.suffix or *, with an optional :port)`);
  }
  const host = match[1];
  if (host === '*') return { host: '', wildcard: false, any: true, port };
  if (host.startsWith('*.')) return { host: host.slice(1), wildcard: true, any: false, port };
  return { host, wildcard: false, any: false, port };
}

/** Splits a comma-separated list (the environment variable's form), dropping empty items. */
export function splitHostList(text: string): string[] {
  return text
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item.length > 0);
}

/** `url` parsed, or undefined when it is missing or not a URL. */
export function toUrl(url: string | URL | undefined): URL | undefined {
  if (url instanceof URL) return url;
  if (typeof url !== 'string') return undefined;
  try {
    return new URL(url);
  } catch {
    return undefined;
  }
}

/** Compiles `patterns` once; throws TypeError on a pattern that is not one. A URL it cannot read never matches. */
export function compileHostList(patterns: readonly string[]): HostMatcher {
  if (!Array.isArray(patterns)) throw new TypeError('a host list must be an array of strings');
  const compiled = patterns.map((pattern) => {
    if (typeof pattern !== 'string') throw new TypeError('a host list must be an array of strings');
    return parsePattern(pattern);
  });
  return (input) => {
    const url = toUrl(input);
    if (url === undefined) return false;
    const host = url.hostname.toLowerCase();
    const port = url.port === '' ? DEFAULT_PORTS[url.protocol] : Number(url.port);
    for (const pattern of compiled) {
      if (pattern.port !== undefined && pattern.port !== port) continue;
      if (pattern.any) return true;
      if (pattern.wildcard ? host.endsWith(pattern.host) && host.length > pattern.host.length : host === pattern.host) return true;
    }
    return false;
  };
}
