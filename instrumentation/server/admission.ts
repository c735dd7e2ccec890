import type { IncomingMessage } from 'node:http';
import { defaultTextMapGetter } from '@opentelemetry/api';
import { safeExecuteInTheMiddle } from '@opentelemetry/instrumentation';
import { DeadlinePropagator } from '../../src/propagation/DeadlinePropagator';
import type { DeadlineSource } from '../../src/deadline';
import type { ResolvedConfig } from '../config';

/** The deadline an incoming request is admitted with, before it becomes a DeadlineNode. */
export interface IncomingBudget {
  remainingMs: number;
  expiresAtMs: number;
  source: DeadlineSource;
  wireSkewMs: number | undefined;
}

export type RejectCode = 'DEADLINE_EXCEEDED' | 'INSUFFICIENT_BUDGET';

/**
 * Reads the budget of an incoming request: the caller's headers if the caller
 * is trusted (capped at `maxIncomingMs`), else `defaultTimeoutMs` if set, else
 * none. A `trustIncoming` hook that throws counts as "do not trust".
 */
export function incomingBudget(settings: ResolvedConfig, propagator: DeadlinePropagator, request: IncomingMessage): IncomingBudget | undefined {
  const trust = settings.trustIncoming;
  const trusted = trust === undefined || safeExecuteInTheMiddle(() => trust(request), () => {}, true) === true;
  const wire = trusted ? propagator.read(request.headers, defaultTextMapGetter) : undefined;
  if (wire !== undefined) return { ...wire, source: 'remote' };
  if (settings.defaultTimeoutMs === undefined) return undefined;
  return {
    remainingMs: settings.defaultTimeoutMs,
    expiresAtMs: Date.now() + settings.defaultTimeoutMs,
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
