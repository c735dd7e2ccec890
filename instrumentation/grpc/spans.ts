import { propagation, SpanKind, SpanStatusCode, trace, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { GRPC_OK, type GrpcMetadata } from './grpc-types';
import { METADATA_GETTER } from './metadata';

/** OTel RPC semantic convention names (stable strings; not imported, to stay on any semconv version). */
export const ATTR_RPC_GRPC_STATUS_CODE = 'rpc.grpc.status_code';

/** The recording span of `kind` active in `ctx`: instrumentation-grpc's, when it is registered. */
export function coveringSpan(ctx: Context, kind: SpanKind): Span | undefined {
  const span = trace.getSpan(ctx);
  const spanKind = (span as unknown as { kind?: SpanKind } | undefined)?.kind;
  return spanKind === kind && span!.isRecording() ? span : undefined;
}

/**
 * A span of our own for a call that no gRPC instrumentation covers, named
 * `package.Service/Method` by the OTel RPC conventions; a malformed path is
 * kept whole as the method.
 */
export function startRpcSpan(tracer: Tracer, kind: SpanKind, path: string, parent: Context): Span {
  const name = path.startsWith('/') ? path.slice(1) : path;
  const slash = name.lastIndexOf('/');
  const attributes = { 'rpc.system': 'grpc', 'rpc.service': slash <= 0 ? '' : name.slice(0, slash), 'rpc.method': slash <= 0 ? name : name.slice(slash + 1) };
  return tracer.startSpan(name, { kind, attributes }, parent);
}

/** A server span of our own for a call no gRPC instrumentation covers, started at first use; `parent` is where it started. */
export class LazyServerSpan {
  parent: Context;
  private started: Span | undefined;

  constructor(private readonly tracer: Tracer, private readonly path: string, private readonly ctx: Context, private readonly metadata: GrpcMetadata) {
    this.parent = ctx;
  }

  readonly span = (): Span => {
    // Under the caller's trace context and baggage, as instrumentation-grpc would extract them.
    this.started ??= startRpcSpan(this.tracer, SpanKind.SERVER, this.path, (this.parent = propagation.extract(this.ctx, this.metadata, METADATA_GETTER)));
    return this.started;
  };
}

/** UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS. */
const SERVER_ERROR_CODES = new Set([2, 4, 12, 13, 14, 15]);

/** Ends a span of our own with the call's gRPC status, as instrumentation-grpc does. */
export function endRpcSpan(span: Span, code: number, kind: SpanKind): void {
  span.setAttribute(ATTR_RPC_GRPC_STATUS_CODE, code);
  // Server spans: only codes that mean the server failed are errors (OTel RPC conventions).
  const failed = code !== GRPC_OK && (kind === SpanKind.CLIENT || SERVER_ERROR_CODES.has(code));
  if (failed) span.setStatus({ code: SpanStatusCode.ERROR, message: String(code) });
  span.end();
}
