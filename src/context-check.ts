import { context, createContextKey, diag, ROOT_CONTEXT } from '@opentelemetry/api';

/** Without a context manager no deadline is ever active, silently; this says so, once. */

export const NO_CONTEXT_MANAGER_WARNING_CODE = 'OTEL_DEADLINE_NO_CONTEXT_MANAGER';

const MESSAGE =
  'otel-deadline: no OpenTelemetry context manager is registered, so no deadline is ever active: nested ' +
  'withDeadline calls are not clamped and outgoing calls do not inherit the cutoff. Register one: start the ' +
  'NodeSDK (or run with --import otel-deadline/register), call NodeTracerProvider#register(), or call ' +
  "context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable()) from '@opentelemetry/context-async-hooks'.";

const PROBE = createContextKey('otel-deadline.context-probe');
let state: 'unknown' | 'working' | 'warned' = 'unknown';

/** True when a value set with `context.with` can be read back from `context.active()`. */
function contextWorks(): boolean {
  return context.with(ROOT_CONTEXT.setValue(PROBE, true), () => context.active().getValue(PROBE) === true);
}

/**
 * Until it has seen one work, checks that a context manager carries values; the
 * first time not, warns (diag and process warning OTEL_DEADLINE_NO_CONTEXT_MANAGER).
 */
export function checkContextManager(): void {
  if (state === 'working') return;
  if (contextWorks()) {
    state = 'working';
    return;
  }
  if (state === 'warned') return;
  state = 'warned';
  diag.warn(MESSAGE);
  process.emitWarning(MESSAGE, { code: NO_CONTEXT_MANAGER_WARNING_CODE });
}
