import type { TextMapGetter, TextMapSetter } from '@opentelemetry/api';
import { HEADER_GRPC_TIMEOUT } from '../../src/attributes';
import { deadlineEpochMs, type GrpcMetadata, type ServerCallLike } from './grpc-types';
import { formatGrpcTimeout } from './timeout';

type MetadataReader = { get(key: string): unknown[] };

/** Reads grpc-js Metadata as a text map (string values only; `-bin` keys carry Buffers). */
export const METADATA_GETTER: TextMapGetter<MetadataReader> = {
  get(carrier, key) {
    const strings = carrier.get(key).filter((value): value is string => typeof value === 'string');
    return strings.length === 0 ? undefined : strings;
  },
  keys(carrier) {
    return Object.keys((carrier as { getMap?: () => Record<string, unknown> }).getMap?.() ?? {});
  },
};

/** Writes text-map entries into grpc-js Metadata, replacing what was there. */
export const METADATA_SETTER: TextMapSetter<GrpcMetadata> = { set: (carrier, key, value) => carrier.set(key, value) };

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
