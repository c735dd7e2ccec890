import { context, createContextKey, diag, ROOT_CONTEXT } from '@opentelemetry/api';

/**
 * Without a registered context manager the API's no-op one is in place:
 * `context.with` runs the function but `context.active()` stays empty, so a
 * deadline is never active. Nested `withDeadline` calls are then not clamped
 * and calls do not inherit the deadline, silently. This says so, once.
 */

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
 * Checks, until it has seen it work once, that a context manager carries
 * values; warns through `diag.warn` and a process warning (code
 * OTEL_DEADLINE_NO_CONTEXT_MANAGER) the first time it does not. A manager
 * registered later is picked up by the next check.
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
