import { propagation, SpanKind, SpanStatusCode, trace, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { GRPC_OK } from './grpc-types';
import { METADATA_GETTER } from './metadata';

/** OTel RPC semantic convention names (stable strings; not imported, to stay on any semconv version). */
export const ATTR_RPC_SYSTEM = 'rpc.system';
export const ATTR_RPC_SERVICE = 'rpc.service';
export const ATTR_RPC_METHOD = 'rpc.method';
export const ATTR_RPC_GRPC_STATUS_CODE = 'rpc.grpc.status_code';

/** `/package.Service/Method` split as the RPC conventions name it; a malformed path is kept whole as the method. */
export function rpcNames(path: string): { service: string; method: string } {
  const slash = path.lastIndexOf('/');
  if (slash <= 0) return { service: '', method: path.replace(/^\//, '') };
  return { service: path.slice(path.startsWith('/') ? 1 : 0, slash), method: path.slice(slash + 1) };
}

/** Span name by the OTel RPC conventions: `package.Service/Method`. */
export function rpcSpanName(path: string): string {
  return path.startsWith('/') ? path.slice(1) : path;
}

/** The recording span of `kind` active in `ctx`: instrumentation-grpc's, when it is registered. */
export function coveringSpan(ctx: Context, kind: SpanKind): Span | undefined {
  const span = trace.getSpan(ctx);
  const spanKind = (span as unknown as { kind?: SpanKind } | undefined)?.kind;
  return spanKind === kind && span!.isRecording() ? span : undefined;
}

/** A span of our own for a call that no gRPC instrumentation covers. */
export function startRpcSpan(tracer: Tracer, kind: SpanKind, path: string, parent: Context): Span {
  const { service, method } = rpcNames(path);
  return tracer.startSpan(
    rpcSpanName(path),
    { kind, attributes: { [ATTR_RPC_SYSTEM]: 'grpc', [ATTR_RPC_SERVICE]: service, [ATTR_RPC_METHOD]: method } },
    parent,
  );
}

/** Ends a span of our own with the call's gRPC status, as instrumentation-grpc does. */
export function endRpcSpan(span: Span, code: number, kind: SpanKind): void {
  span.setAttribute(ATTR_RPC_GRPC_STATUS_CODE, code);
  // Server spans: only codes that mean the server failed are errors (OTel RPC conventions).
  const failed = code !== GRPC_OK && (kind === SpanKind.CLIENT || SERVER_ERROR_CODES.has(code));
  if (failed) span.setStatus({ code: SpanStatusCode.ERROR, message: String(code) });
  span.end();
}

/** UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS. */
const SERVER_ERROR_CODES = new Set([2, 4, 12, 13, 14, 15]);

/** The context of an incoming call's caller, for a server span of our own (trace-context and baggage). */
export function callerContext(ctx: Context, metadata: { get(key: string): unknown[] }): Context {
  return propagation.extract(ctx, metadata, METADATA_GETTER);
}

/** For callers that need the active context of the span they just started. */
export function withSpan(ctx: Context, span: Span | undefined): Context {
  return span === undefined ? ctx : trace.setSpan(ctx, span);
}
