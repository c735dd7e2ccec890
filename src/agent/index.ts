// Agent workflow helpers: budget-aware retries, admission with a response
// reserve, queue envelopes, declared background work and tool-call events.
export { retryWithinDeadline, defaultRetryable, type RetryOptions, type RetryAttempt, type BackoffSchedule } from './retry';
export { carriesDeadlineExpired } from './replies';
export { admit, withAdmission, type AdmitOptions, type AdmissionOptions } from './admit';
export { toDeadlineEnvelope, readDeadlineEnvelope, admitEnvelope, withEnvelope, type DeadlineEnvelope, type AdmitEnvelopeOptions } from './envelope';
export { detach, type DetachOptions, type DetachedJob } from './detach';
export { recordToolEvent, runTool, type ToolEventDetails, type ToolOptions, type ToolCall } from './tool-events';
export { RetryEvent, ToolEvents, ToolAttributes, type RetryDecision, type ToolEventName } from './attributes';
