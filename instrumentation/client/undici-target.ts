/**
 * The URL an undici call goes to, for `ignoreOutgoingRequest`, `propagateTo`
 * and `trustReply`. A Client or Pool keeps its origin under undici's
 * `Symbol('url')` (no public field has it; docs/internals.md) and uses it
 * whatever `opts.origin` says; an Agent takes `opts.origin`.
 */

type Options = { origin?: unknown; path?: unknown };

/** A Client's or Pool's own origin, or undefined for dispatchers without one (Agent, BalancedPool). */
function ownOrigin(dispatcher: unknown): string | undefined {
  if (typeof dispatcher !== 'object' || dispatcher === null) return undefined;
  for (const key of Object.getOwnPropertySymbols(dispatcher)) {
    if (key.description !== 'url') continue;
    const value = (dispatcher as Record<symbol, unknown>)[key];
    if (value instanceof URL) return value.origin;
  }
  return undefined;
}

function joinUrl(origin: unknown, path: unknown): string | undefined {
  if (origin === undefined || origin === null) return undefined;
  try {
    return new URL(typeof path === 'string' ? path : '/', String(origin)).href;
  } catch {
    return undefined;
  }
}

/** The URL of a Dispatcher method call (`dispatcher.request(opts)`), when it can be told. */
export function dispatcherCallUrl(dispatcher: unknown, options: Options): string | undefined {
  return joinUrl(ownOrigin(dispatcher) ?? options.origin, options.path);
}

/** The URL of a top-level call (`request(url, opts)`): a string, a URL, or an options-like object. */
export function topLevelCallUrl(target: unknown): string | undefined {
  if (typeof target === 'string') return target;
  if (target instanceof URL) return target.href;
  if (typeof target === 'object' && target !== null) return joinUrl((target as Options).origin, (target as Options).path);
  return undefined;
}

/** The URL of an undici Request as the diagnostics channels show it (one hop, redirects included). */
export function undiciRequestUrl(request: object): string | undefined {
  return joinUrl((request as Options).origin, (request as Options).path);
}
