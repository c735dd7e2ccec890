export { openDeadline, withDeadline } from './open';
export { getDeadline, setDeadline } from './context';
export { MAX_DEADLINE_MS } from './time';
export type { Deadline, ManagedDeadline, DeadlineOptions, DeadlineSource } from './deadline';
export {
  DeadlineExceededError,
  InsufficientBudgetError,
  DeadlineCancelledError,
  isDeadlineError,
  type DeadlineErrorCode,
} from './errors';
export {
  DeadlinePropagator,
  type DeadlinePropagatorConfig,
  type ClockPolicy,
  type IncomingDeadline,
} from './propagation/DeadlinePropagator';
export { DeadlineSpanProcessor, type DeadlineSpanProcessorConfig } from './processor/DeadlineSpanProcessor';
export * from './attributes';
export * from './agent';
export * from '../instrumentation';
