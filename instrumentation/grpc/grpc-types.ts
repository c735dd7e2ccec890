/**
 * The few shapes of @grpc/grpc-js 1.x this instrumentation touches, written
 * out structurally: grpc-js is not a dependency.
 */

/** grpc-js `status` codes used here (the gRPC protocol's own numbers). */
export const GRPC_OK = 0;
export const GRPC_CANCELLED = 1;
export const GRPC_DEADLINE_EXCEEDED = 4;

export interface GrpcMetadata {
  get(key: string): (string | Buffer)[];
  set(key: string, value: string): void;
  remove(key: string): void;
}

export type MetadataConstructor = new () => GrpcMetadata;

export interface GrpcStatus {
  code: number;
  details: string;
  metadata: GrpcMetadata | null;
}

/** What a client call reports to the layer above it (grpc-js `InterceptingListener`). */
export interface CallListener {
  onReceiveMetadata(metadata: GrpcMetadata): void;
  onReceiveMessage(message: unknown): void;
  onReceiveStatus(status: GrpcStatus): void;
}

/** The parts of the object `Channel#createCall` returns (grpc-js's internal `Call`) used here: docs/internals.md. */
export interface ChannelCall {
  start(metadata: GrpcMetadata, listener: CallListener): void;
  cancelWithStatus(code: number, details: string): void;
  getPeer(): string;
}

export interface GrpcChannel {
  getTarget(): string;
}

/** `Channel#createCall`'s deadline: epoch ms or a Date; Infinity for none. */
export type GrpcDeadline = Date | number;

/** The part of every server call object (unary, streams) used here. */
export interface ServerCallLike {
  readonly metadata: GrpcMetadata;
  getDeadline(): GrpcDeadline;
  getPeer(): string;
  on(event: string | symbol, listener: (...args: unknown[]) => void): unknown;
  removeListener(event: string | symbol, listener: (...args: unknown[]) => void): unknown;
  emit(event: string | symbol, ...args: unknown[]): boolean;
}

export type ServerCallback = (error: unknown, value?: unknown, trailer?: unknown, flags?: unknown) => void;

/** One method of a service definition passed to Server#addService. */
export interface MethodDefinitionLike {
  path: string;
  requestStream: boolean;
  responseStream: boolean;
  originalName?: string;
}

/** Epoch ms of a grpc-js deadline (Infinity for none). */
export function deadlineEpochMs(deadline: GrpcDeadline | null | undefined): number {
  if (deadline instanceof Date) return deadline.getTime();
  return typeof deadline === 'number' && !Number.isNaN(deadline) ? deadline : Infinity;
}
