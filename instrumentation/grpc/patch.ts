import { wrapMethod, type MethodPatch } from '../wrap';
import { makeCreateCallWrapper, type GrpcClientHost } from './client';
import type { MetadataConstructor } from './grpc-types';
import { makeAddServiceWrapper, type GrpcServerHost } from './server';

type Exports = Record<string, unknown>;
type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;

/** The grpc-js version range this instrumentation knows the internals of (Channel#createCall, Server#addService). */
export const GRPC_JS_VERSIONS = ['>=1.10.0 <2'];

function prototypeOf(exports: Exports, name: string): Exports | undefined {
  const value = exports[name] as { prototype?: unknown } | undefined;
  return typeof value === 'function' && typeof value.prototype === 'object' ? (value.prototype as Exports) : undefined;
}

/**
 * Patches one loaded @grpc/grpc-js: the channel's createCall (every client call) and the server's addService
 * (every handler). CommonJS exports and import-in-the-middle's namespace hold the same classes: patched once.
 */
export function patchGrpcJs(host: GrpcClientHost & GrpcServerHost, owner: object, isActive: () => boolean, exports: Exports): MethodPatch[] {
  const Metadata = exports.Metadata as MetadataConstructor | undefined;
  const channel = prototypeOf(exports, 'Channel');
  const server = prototypeOf(exports, 'Server');
  if (typeof Metadata !== 'function' || channel === undefined || server === undefined) return [];
  return [
    wrapMethod(channel, 'createCall', owner, isActive, makeCreateCallWrapper(host, Metadata) as unknown as (original: AnyFunction) => AnyFunction),
    wrapMethod(server, 'addService', owner, isActive, makeAddServiceWrapper(host, Metadata) as unknown as (original: AnyFunction) => AnyFunction),
  ].filter((patch) => patch !== undefined);
}
