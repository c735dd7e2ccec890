import type { IncomingMessage } from 'node:http';
import { defaultTextMapGetter, type TextMapGetter } from '@opentelemetry/api';
import { safeExecuteInTheMiddle } from '@opentelemetry/instrumentation';
import { DeadlinePropagator } from '../../src/propagation/DeadlinePropagator';
import type { DeadlineSource } from '../../src/deadline';
import type { DeadlineNode } from '../../src/deadline-node';
import { monotonicNow } from '../../src/time';
import type { ResolvedConfig } from '../config';

/** The deadline an incoming request is admitted with, before it becomes a DeadlineNode. */
export interface IncomingBudget {
  remainingMs: number;
  cutoffMono: number;
  expiresAtMs: number;
  source: DeadlineSource;
  wireSkewMs: number | undefined;
}

export type RejectCode = 'DEADLINE_EXCEEDED' | 'INSUFFICIENT_BUDGET';

/**
 * The budget of a deadline a global propagator already read from this
 * request's headers (instrumentation-http extracts before we run), capped at
 * `maxIncomingMs`. Reusing its cutoff saves parsing the headers twice, and a
 * relative header read again a moment later would end a moment later.
 */
export function fromExtracted(extracted: DeadlineNode, maxIncomingMs: number | undefined): IncomingBudget {
  const remainingMs = extracted.remainingMs();
  if (maxIncomingMs !== undefined && remainingMs > maxIncomingMs) return capped(maxIncomingMs, extracted.wireSkewMs);
  return { remainingMs, cutoffMono: extracted.cutoffMono, expiresAtMs: extracted.expiresAtMs, source: 'remote', wireSkewMs: extracted.wireSkewMs };
}

/**
 * A budget of `ms` from now. The wall clock is read before the monotonic one,
 * so a pause between the two reads can only make the cutoff sent downstream
 * (expiresAtMs) earlier than the one enforced here, never later.
 */
function capped(ms: number, wireSkewMs: number | undefined): IncomingBudget {
  const expiresAtMs = Date.now() + ms;
  return { remainingMs: ms, cutoffMono: monotonicNow() + ms, expiresAtMs, source: 'remote', wireSkewMs };
}

/**
 * Reads the budget of an incoming request: the caller's headers if the caller
 * is trusted (capped at `maxIncomingMs`), else `defaultTimeoutMs` if set, else
 * none. A `trustIncoming` hook that throws counts as "do not trust".
 */
export function incomingBudget(
  settings: ResolvedConfig,
  propagator: DeadlinePropagator,
  request: IncomingMessage,
  extracted: DeadlineNode | undefined,
): IncomingBudget | undefined {
  const trust = settings.trustIncoming;
  const trusted = trust === undefined || safeExecuteInTheMiddle(() => trust(request), () => {}, true) === true;
  if (trusted && extracted !== undefined) return fromExtracted(extracted, settings.maxIncomingMs);
  return budgetFromWire(settings, propagator, trusted, request.headers, defaultTextMapGetter);
}

/**
 * The budget a caller's wire values give, if the caller is `trusted`, else
 * `defaultTimeoutMs` if set, else none. Shared by every server transport:
 * `carrier` and `getter` are that transport's headers or metadata.
 */
export function budgetFromWire<Carrier>(
  settings: ResolvedConfig,
  propagator: DeadlinePropagator,
  trusted: boolean,
  carrier: Carrier,
  getter: TextMapGetter<Carrier>,
): IncomingBudget | undefined {
  const wire = trusted ? propagator.read(carrier, getter) : undefined;
  if (wire !== undefined) {
    // Spelled out: an object spread here costs microseconds per request on Node 20.
    return {
      remainingMs: wire.remainingMs,
      cutoffMono: monotonicNow() + wire.remainingMs,
      expiresAtMs: wire.expiresAtMs,
      source: 'remote',
      wireSkewMs: wire.wireSkewMs,
    };
  }
  if (settings.defaultTimeoutMs === undefined) return undefined;
  const expiresAtMs = Date.now() + settings.defaultTimeoutMs; // the wall clock first: see capped()
  return {
    remainingMs: settings.defaultTimeoutMs,
    cutoffMono: monotonicNow() + settings.defaultTimeoutMs,
    expiresAtMs,
    source: 'local',
    wireSkewMs: undefined,
  };
}

/** Why enforce mode answers the request at once instead of running the handler, if it does. */
export function rejectionFor(budget: IncomingBudget, minUsefulMs: number): RejectCode | undefined {
  if (budget.remainingMs <= 0) return 'DEADLINE_EXCEEDED';
  if (budget.remainingMs < minUsefulMs) return 'INSUFFICIENT_BUDGET';
  return undefined;
}
