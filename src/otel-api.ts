import { context } from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';

/**
 * @internal `@opentelemetry/api` and `@opentelemetry/core` export each name,
 * in their CommonJS builds, through a getter on an object in dictionary mode:
 * every `context.active()` written against the import paid, in compiled code,
 * an inline-cache miss (the LoadIC builtin) and a getter call. A callgrind
 * profile put 654 instructions of LoadIC per guarded Redis command in our
 * ioredis wrapper; reading these two from here took 255 of them (the other
 * 399 were the wrappers' host: see instrumentation/wrapper-host.ts). The hot
 * paths read them from here, where they are read once: the context API is a
 * singleton, and the function a plain one.
 */
export const contextApi = context;

/** @internal See contextApi. */
export const tracingSuppressed = isTracingSuppressed;
