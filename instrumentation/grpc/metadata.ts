import { propagation, trace, type Context, type Span, type TextMapGetter, type TextMapSetter } from '@opentelemetry/api';
import { HEADER_AT_MS, HEADER_BAGGAGE, HEADER_GRPC_TIMEOUT, HEADER_REMAINING_MS } from '../../src/attributes';
import { withDeadlineOffWire, withDeadlineOnWire } from '../../src/context';
import type { Deadline } from '../../src/deadline';
import { DeadlinePropagator } from '../../src/propagation/DeadlinePropagator';
import { baggageWithoutDeadline } from '../client/headers';
import type { GrpcCallInit } from './client-call';
import { deadlineEpochMs, type GrpcMetadata, type ServerCallLike } from './grpc-types';
import { grpcTargetUrl } from './target-url';
import { formatGrpcTimeout } from './timeout';

type MetadataReader = { get(key: string): unknown[] };

/** Reads grpc-js Metadata as a text map (string values only; `-bin` keys carry Buffers). */
export const METADATA_GETTER: TextMapGetter<MetadataReader> = {
  get(carrier, key) {
    const values = carrier.get(key);
    if (values.length === 0) return undefined;
    const strings = values.filter((value): value is string => typeof value === 'string');
    return strings.length === 0 ? undefined : strings;
  },
  keys(carrier) {
    const map = (carrier as { getMap?: () => Record<string, unknown> }).getMap?.();
    return map === undefined ? [] : Object.keys(map);
  },
};

/** Writes text-map entries into grpc-js Metadata, replacing what was there. */
export const METADATA_SETTER: TextMapSetter<GrpcMetadata> = {
  set(carrier, key, value) {
    carrier.set(key, value);
  },
};

/**
 * An incoming call's deadline values as the propagator reads them. grpc-js keeps `grpc-timeout` out of the
 * metadata and reports the deadline it computed on arrival (`getDeadline()`): handed back as the time left
 * now, in `grpc-timeout` form.
 */
export const SERVER_CALL_GETTER: TextMapGetter<ServerCallLike> = {
  get(call, key) {
    if (key === HEADER_GRPC_TIMEOUT) {
      const deadline = deadlineEpochMs(call.getDeadline());
      if (deadline === Infinity) return undefined;
      return formatGrpcTimeout(Math.max(0, deadline - Date.now()));
    }
    return METADATA_GETTER.get(call.metadata, key);
  },
  keys(call) {
    return METADATA_GETTER.keys(call.metadata);
  },
};

/** Writes our headers from the context's deadline; shared, it holds no per-call state. */
const propagator = new DeadlinePropagator();

/** Our deadline metadata if `propagateTo` lets it go to this channel's target, else none. */
export function injectCallMetadata(metadata: GrpcMetadata, init: GrpcCallInit): void {
  const { settings, channel, ctx, deadline, ownSpan, span, ownEpoch } = init;
  const spanOfOurs = ownSpan ? span : undefined;
  const allowed = settings.propagatesTo;
  if (allowed === undefined || allowed(grpcTargetUrl(channel.getTarget()))) injectDeadline(metadata, ctx, deadline, spanOfOurs, ownEpoch);
  else injectWithoutDeadline(metadata, ctx, spanOfOurs);
}

/**
 * Our deadline metadata, next to the `grpc-timeout` grpc-js writes from the clamped deadline; a call's own
 * earlier deadline goes in ours too, so the server sees no false skew. With a span of our own, the global
 * propagator writes trace-context and baggage as instrumentation-grpc would.
 */
function injectDeadline(metadata: GrpcMetadata, callerCtx: Context, deadline: Deadline, ownSpan: Span | undefined, ownEpoch: number): void {
  // The caller may run where an earlier call to an unlisted host left its mark (see withDeadlineOnWire): this target is listed.
  const ctx = withDeadlineOnWire(callerCtx);
  if (ownSpan !== undefined) propagation.inject(trace.setSpan(ctx, ownSpan), metadata, METADATA_SETTER);
  propagator.inject(ctx, metadata, METADATA_SETTER);
  if (ownEpoch === Infinity) return;
  const nowEpoch = Date.now();
  if (ownEpoch < nowEpoch + deadline.remainingMs()) {
    metadata.set(HEADER_REMAINING_MS, String(Math.max(0, Math.floor(ownEpoch - nowEpoch))));
    metadata.set(HEADER_AT_MS, String(Math.floor(ownEpoch)));
  }
}

/**
 * For a target off the `propagateTo` list: trace context as usual, but none
 * of our metadata and no `deadline.at_ms` baggage entry, whoever wrote them
 * (instrumentation-grpc injects through the global propagator first). The
 * call keeps its clamped `grpc-timeout`: that is gRPC's own deadline.
 */
function injectWithoutDeadline(metadata: GrpcMetadata, ctx: Context, ownSpan: Span | undefined): void {
  if (ownSpan !== undefined) propagation.inject(trace.setSpan(withDeadlineOffWire(ctx), ownSpan), metadata, METADATA_SETTER);
  metadata.remove(HEADER_REMAINING_MS);
  metadata.remove(HEADER_AT_MS);
  const baggage = metadata.get(HEADER_BAGGAGE);
  if (baggage.length === 0) return;
  const kept = baggageWithoutDeadline(baggage.filter((value): value is string => typeof value === 'string'));
  if (kept === undefined) metadata.remove(HEADER_BAGGAGE);
  else metadata.set(HEADER_BAGGAGE, kept);
}
