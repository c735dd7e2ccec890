// Transport instrumentation: fetch, undici 7, node:http/https clients and servers.
export { DeadlineInstrumentation } from './DeadlineInstrumentation';
export type { DeadlineInstrumentationConfig, DeadlineMode, OutgoingRequestInfo, PropagateTo, ReplyInfo } from './types';
export { ATTR_DEADLINE_WOULD_ABORT, ATTR_DEADLINE_WOULD_REJECT, HEADER_DEADLINE_EXPIRED } from './names';
export { DeadlineEnvError } from './env';
