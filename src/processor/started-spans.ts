import type { Span } from '@opentelemetry/api';

type Listener = (span: Span) => void;

/**
 * Spans that DeadlineSpanProcessor sees start under a deadline, shown to
 * whoever asked for the spans of one instrumentation scope. It is how
 * DeadlineInstrumentation finds the span of a driver instrumentation that
 * offers no `requestHook` (instrumentation-mysql2) and records a statement's
 * outcome on it.
 */
const listeners = new Map<string, Listener>();

/** Calls `listener` with each span of `scope` started under a deadline, until the returned function is called. */
export function onSpanStartedUnderDeadline(scope: string, listener: Listener): () => void {
  listeners.set(scope, listener);
  return () => {
    if (listeners.get(scope) === listener) listeners.delete(scope);
  };
}

/** For the processor. */
export function showStartedSpan(span: object): void {
  if (listeners.size === 0) return;
  const scope = (span as { instrumentationScope?: { name?: unknown } }).instrumentationScope?.name;
  if (typeof scope === 'string') listeners.get(scope)?.(span as Span);
}
