import { propagation, trace, type Context, type Span } from '@opentelemetry/api';
import { HEADER_AT_MS, HEADER_BAGGAGE, HEADER_REMAINING_MS } from '../../src/attributes';
import type { Deadline } from '../../src/deadline';
import { DeadlinePropagator } from '../../src/propagation/DeadlinePropagator';
import { parseIntegerMs } from '../../src/propagation/parse';
import { baggageWithoutDeadline } from '../call/baggage-text';
import { withDeadlineOffWire, withDeadlineOnWire } from '../call/wire-context';
import type { GrpcMetadata } from './grpc-types';
import { METADATA_SETTER } from './metadata';

/** Writes our headers from the context's deadline; shared, it holds no per-call state. */
const propagator = new DeadlinePropagator();

/**
 * Our deadline metadata, next to the `grpc-timeout` grpc-js writes from the clamped deadline; a call's own
 * earlier deadline goes in ours too, so the server sees no false skew. With a span of our own, the global
 * propagator writes trace-context and baggage as instrumentation-grpc would. `remainingMs` is the deadline's now.
 */
export function injectDeadline(metadata: GrpcMetadata, callerCtx: Context, deadline: Deadline, remainingMs: number, ownSpan: Span | undefined, ownEpoch: number): void {
  // The caller may run where an earlier call to an unlisted host left its mark (see withDeadlineOnWire): this target is listed.
  const ctx = withDeadlineOnWire(callerCtx);
  if (ownSpan !== undefined) propagation.inject(trace.setSpan(ctx, ownSpan), metadata, METADATA_SETTER);
  if (ownSpan !== undefined || !refreshWritten(metadata, deadline, remainingMs)) propagator.inject(ctx, metadata, METADATA_SETTER);
  if (ownEpoch === Infinity) return;
  const nowEpoch = Date.now();
  if (ownEpoch < nowEpoch + remainingMs) {
    metadata.set(HEADER_REMAINING_MS, String(Math.max(0, Math.floor(ownEpoch - nowEpoch))));
    metadata.set(HEADER_AT_MS, String(Math.floor(ownEpoch)));
  }
}

/**
 * True when the metadata holds what our propagator wrote for this deadline: the global propagator holds a
 * DeadlinePropagator (its fields say so), which instrumentation-grpc's inject ran a moment before (headers and
 * baggage entry), and the cutoff written is this one. The remaining it wrote is written again, as it is now: an
 * interceptor may have held the start back.
 */
function refreshWritten(metadata: GrpcMetadata, deadline: Deadline, remainingMs: number): boolean {
  const written = metadata.get(HEADER_AT_MS);
  if (!globalPropagatorWritesDeadline() || written.length !== 1 || typeof written[0] !== 'string' || parseIntegerMs(written[0]) !== Math.floor(deadline.expiresAtMs)) return false;
  metadata.set(HEADER_REMAINING_MS, String(Math.floor(remainingMs)));
  return true;
}

/** Whether the global propagator's fields list ours; a user propagator whose `fields()` throws counts as no. */
function globalPropagatorWritesDeadline(): boolean {
  try {
    return propagation.fields().includes(HEADER_AT_MS);
  } catch {
    return false;
  }
}

/**
 * For a target off the `propagateTo` list: trace context as usual, but none
 * of our metadata and no `deadline.at_ms` baggage entry, whoever wrote them
 * (instrumentation-grpc injects through the global propagator first). The
 * call keeps its clamped `grpc-timeout`: that is gRPC's own deadline.
 */
export function injectWithoutDeadline(metadata: GrpcMetadata, ctx: Context, ownSpan: Span | undefined): void {
  if (ownSpan !== undefined) propagation.inject(trace.setSpan(withDeadlineOffWire(ctx), ownSpan), metadata, METADATA_SETTER);
  metadata.remove(HEADER_REMAINING_MS);
  metadata.remove(HEADER_AT_MS);
  const baggage = metadata.get(HEADER_BAGGAGE);
  if (baggage.length === 0) return;
  const kept = baggageWithoutDeadline(baggage.filter((value): value is string => typeof value === 'string'));
  if (kept === undefined) metadata.remove(HEADER_BAGGAGE);
  else metadata.set(HEADER_BAGGAGE, kept);
}
