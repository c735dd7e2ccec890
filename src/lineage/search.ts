import { ATTR_DEADLINE_LATE, ATTR_DEADLINE_OUTCOME } from '../attributes';
import { LineageInputError } from './input-error';
import { spansFromJaeger } from './jaeger';
import { firstJaegerError, jaegerBase, jaegerGet } from './jaeger-http';
import { groupTraces, type LineageTrace } from './model';

/**
 * Search mode: Jaeger tag searches, for one service, on `deadline.late=true` and on
 * `deadline.outcome=expired`/`cancelled` (a callee may have gone on, remote.ts).
 */
const SEARCH_TAGS: readonly (readonly [string, string])[] = [
  [ATTR_DEADLINE_LATE, 'true'],
  [ATTR_DEADLINE_OUTCOME, 'expired'],
  [ATTR_DEADLINE_OUTCOME, 'cancelled'],
];

export interface SearchOptions {
  service: string;
  lookbackMs: number;
  /** Passed to Jaeger as each query's `limit`: it returns at most this many traces per query. */
  limit: number;
  timeoutMs: number;
  /** The end of the search window, epoch ms; now by default (tests pin it). */
  nowMs?: number;
}

interface TagQueryResult {
  tag: string;
  traces: number;
  /** The query returned `limit` traces: older matches may have been left out. */
  full: boolean;
}

export interface SearchResult {
  base: string;
  /** Every trace any query returned, each once, newest query order kept. */
  traces: LineageTrace[];
  queries: TagQueryResult[];
}

async function knownServices(base: string, timeoutMs: number): Promise<string[]> {
  const reply = await jaegerGet(base, '/api/services', timeoutMs);
  // An empty Jaeger answers {"data":null}.
  const data = reply.answer?.data === null ? [] : (reply.answer?.data as unknown);
  if (reply.status !== 200 || !Array.isArray(data)) {
    throw new LineageInputError(`${base} does not look like Jaeger's query service (GET /api/services answered HTTP ${reply.status}${firstJaegerError(reply)})`);
  }
  return data.filter((name): name is string => typeof name === 'string');
}

export async function searchJaeger(source: string, options: SearchOptions): Promise<SearchResult> {
  const base = jaegerBase(source);
  const { service, limit, timeoutMs } = options;
  if (service.trim() === '') throw new LineageInputError('--service needs a service name');
  const services = await knownServices(base, timeoutMs);
  if (!services.includes(service)) {
    const listed = services.length === 0 ? 'it holds no traces yet' : `it knows ${services.slice(0, 20).join(', ')}`;
    throw new LineageInputError(`nothing found: Jaeger at ${base} has no spans of service ${JSON.stringify(service)}; ${listed}`);
  }
  const endMs = options.nowMs ?? Date.now();
  const startMs = endMs - options.lookbackMs;
  const byId = new Map<string, LineageTrace>();
  const queries: TagQueryResult[] = [];
  for (const [key, value] of SEARCH_TAGS) {
    const params = new URLSearchParams({
      service,
      tags: JSON.stringify({ [key]: value }),
      // Jaeger's query API takes the window in epoch microseconds.
      start: String(startMs * 1000),
      end: String(endMs * 1000),
      limit: String(limit),
    });
    const reply = await jaegerGet(base, `/api/traces?${params}`, timeoutMs);
    if (reply.status !== 200 || reply.answer === undefined) {
      throw new LineageInputError(`Jaeger at ${base} refused the search for ${key}=${value}: HTTP ${reply.status}${firstJaegerError(reply)}`);
    }
    const found = groupTraces(spansFromJaeger(reply.answer));
    queries.push({ tag: `${key}=${value}`, traces: found.length, full: found.length >= limit });
    for (const trace of found) if (!byId.has(trace.traceId)) byId.set(trace.traceId, trace);
  }
  return { base, traces: [...byId.values()], queries };
}
