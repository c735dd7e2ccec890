export { openDeadline, withDeadline } from './open';
export { getDeadline, setDeadline } from './context';
export { MAX_DEADLINE_MS } from './time';
export type { Deadline, ManagedDeadline, DeadlineOptions, DeadlineSource } from './deadline';
export {
  DeadlineExceededError,
  InsufficientBudgetError,
  DeadlineCancelledError,
  isDeadlineError,
  DEADLINE_HTTP_STATUS,
  CANCELLED_HTTP_STATUS,
  type DeadlineErrorCode,
} from './errors';
export { expressDeadlineErrors, koaDeadlineErrors, honoDeadlineErrors, type DeadlineErrorBody } from './frameworks';
export {
  DeadlinePropagator,
  type DeadlinePropagatorConfig,
  type ClockPolicy,
  type IncomingDeadline,
} from './propagation/DeadlinePropagator';
export { DeadlineSpanProcessor, type DeadlineSpanProcessorConfig } from './processor/DeadlineSpanProcessor';
export {
  DeadlineAttributes,
  DeadlineMetrics,
  DeadlineHeaders,
  type DeadlineOutcome,
  type DeadlineViolation,
} from './attributes';
export * from './agent';
export * from '../instrumentation';
