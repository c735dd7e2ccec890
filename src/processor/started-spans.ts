import type { Span } from '@opentelemetry/api';

type Listener = (span: Span) => void;

/** Spans started under a deadline, by scope: how DeadlineInstrumentation finds a span with no `requestHook` (mysql2). */
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
