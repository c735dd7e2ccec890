// Transport instrumentation: fetch, undici, node:http/https clients and servers, the database drivers and grpc-js.
export { DeadlineInstrumentation } from './DeadlineInstrumentation';
export type { DeadlineInstrumentationConfig, DeadlineMode, IncomingGrpcCallInfo, OutgoingRequestInfo, PropagateTo, ReplyInfo } from './types';
export { DeadlineEnvError } from './env';
