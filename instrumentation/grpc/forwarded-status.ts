import { errorMonitor } from 'node:events';
import { HEADER_DEADLINE_EXPIRED } from '../names';
import { FORWARDED_MARKER_VALUE } from '../server/forwarded-marker';
import type { GrpcMetadata, HandlerKind, ServerCallback, ServerCallLike } from './grpc-types';

/**
 * A handler's status never claims a refusal of the call it answers: only our
 * admission refuses, before the handler runs. A handler that passes on the
 * error of its own callee (`callback(err)`, or `call.emit('error', err)` on a
 * stream) passes on that callee's trailers too, `x-deadline-expired: 1`
 * included; it goes out restated (see FORWARDED_MARKER_VALUE).
 */

interface MetadataLike extends GrpcMetadata {
  clone(): MetadataLike;
}

function isMetadata(value: unknown): value is MetadataLike {
  const candidate = value as Partial<MetadataLike> | null | undefined;
  return typeof candidate?.get === 'function' && typeof candidate.set === 'function' && typeof candidate.clone === 'function';
}

/** A copy of `metadata` with the marker restated, or undefined when it has no marker (or is not grpc-js Metadata). */
function restated(metadata: unknown): MetadataLike | undefined {
  if (!isMetadata(metadata) || metadata.get(HEADER_DEADLINE_EXPIRED).length === 0) return undefined;
  const copy = metadata.clone();
  copy.set(HEADER_DEADLINE_EXPIRED, FORWARDED_MARKER_VALUE);
  return copy;
}

/**
 * The callback of a unary or client-streaming handler, restating the marker
 * of an error status. grpc-js sends `trailer ?? error.metadata` as the
 * trailers: the restated copy goes in as `trailer`, so the handler's error
 * object is left as it is.
 */
export function restatingCallback(callback: ServerCallback): ServerCallback {
  return (error, value, trailer, flags) => {
    if (error === null || error === undefined) return callback(error, value, trailer, flags);
    const fixed = restated(trailer ?? (error as { metadata?: unknown }).metadata);
    return callback(error, value, fixed ?? trailer, flags);
  };
}

/**
 * For an 'error' on a streaming handler's call, seen through errorMonitor,
 * before grpc-js's own listener turns the error into the status: the error's
 * `metadata` becomes the restated copy (the Metadata object itself is not
 * changed). An error whose `metadata` cannot be replaced is left alone.
 */
export function restateStreamError(error: unknown): void {
  if (typeof error !== 'object' || error === null) return;
  const fixed = restated((error as { metadata?: unknown }).metadata);
  if (fixed === undefined) return;
  try {
    (error as { metadata: unknown }).metadata = fixed;
  } catch {
    // A frozen error: grpc-js will send its trailers as they are.
  }
}

export function isStreamingResponse(kind: HandlerKind): boolean {
  return kind === 'serverStream' || kind === 'bidi';
}

/**
 * For a streaming handler that runs without a deadline of ours (no
 * ServerCallLifecycle): restates the marker of an 'error' on its call, and
 * removes its listeners when the call finishes or is cancelled.
 */
export function watchStreamErrors(call: ServerCallLike): void {
  const detach = (): void => {
    call.removeListener(errorMonitor, restateStreamError);
    call.removeListener('finish', detach);
    call.removeListener('cancelled', detach);
  };
  call.on(errorMonitor, restateStreamError);
  call.on('finish', detach);
  call.on('cancelled', detach);
}
