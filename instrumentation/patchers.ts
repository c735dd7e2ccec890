// What DeadlineInstrumentation patches transports with. Loaded by load-patchers.ts
// when the first instrumentation is made: the package root loads none of it.
export { subscribeUndiciChannels } from './client/channels';
export { makeFetchWrapper } from './client/fetch';
export { makeHttpWrapper } from './client/http';
export { makeUndiciWrapper } from './client/undici';
export { DatabaseDrivers, MYSQL2_INSTRUMENTATION_SCOPE } from './db/modules';
export { GRPC_JS_VERSIONS, patchGrpcJs } from './grpc/patch';
export { patchServerPrototype } from './server/patch';
