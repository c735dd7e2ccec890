/**
 * OTLP/JSON → Jaeger query API answer, following the OpenTelemetry-to-Jaeger
 * mapping Jaeger v2 applies (opentelemetry-collector-contrib pkg/translator/jaeger):
 * resource → process (service.name → serviceName), scope → otel.scope.* tags,
 * attributes → typed tags (int64, float64, bool, string; arrays/maps as JSON
 * text), kind → span.kind (none for INTERNAL), status → otel.status_code /
 * error / otel.status_description, parent → first CHILD_OF reference, links →
 * FOLLOWS_FROM, events → logs, nanoseconds → microseconds.
 *
 * Checked against Jaeger's own fixture pair (otlp2jaeger-in/out.json) in
 * jaeger.test.ts, then used to see our spans the way Jaeger stores them.
 */

interface AnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: string | number;
  doubleValue?: number;
  bytesValue?: string;
  arrayValue?: { values?: AnyValue[] };
  kvlistValue?: { values?: KeyValue[] };
}
interface KeyValue {
  key: string;
  value: AnyValue;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind?: number;
  startTimeUnixNano: string | number;
  endTimeUnixNano: string | number;
  attributes?: KeyValue[];
  events?: { timeUnixNano: string | number; name: string; attributes?: KeyValue[] }[];
  links?: { traceId: string; spanId: string }[];
  status?: { code?: number; message?: string };
}
export interface OtlpJson {
  resourceSpans: {
    resource?: { attributes?: KeyValue[] };
    scopeSpans?: { scope?: { name?: string; version?: string }; spans?: OtlpSpan[] }[];
  }[];
}

export interface JaegerTagOut {
  key: string;
  type: 'string' | 'bool' | 'int64' | 'float64' | 'binary';
  value: string | number | boolean;
}

const KIND_TAG: Record<number, string | undefined> = { 2: 'server', 3: 'client', 4: 'producer', 5: 'consumer' };

function plain(value: AnyValue): unknown {
  if (value.arrayValue !== undefined) return (value.arrayValue.values ?? []).map(plain);
  if (value.kvlistValue !== undefined) {
    return Object.fromEntries((value.kvlistValue.values ?? []).map((kv) => [kv.key, plain(kv.value)]));
  }
  return value.stringValue ?? value.boolValue ?? (value.intValue !== undefined ? Number(value.intValue) : undefined) ??
    value.doubleValue ?? value.bytesValue ?? null;
}

export function toTag(key: string, value: AnyValue): JaegerTagOut {
  if (value.stringValue !== undefined) return { key, type: 'string', value: value.stringValue };
  if (value.boolValue !== undefined) return { key, type: 'bool', value: value.boolValue };
  if (value.intValue !== undefined) {
    const n = Number(value.intValue);
    // Jaeger's JSON keeps int64 beyond JavaScript's safe range as a string.
    return { key, type: 'int64', value: Number.isSafeInteger(n) ? n : String(value.intValue) };
  }
  if (value.doubleValue !== undefined) return { key, type: 'float64', value: Number(value.doubleValue) };
  if (value.bytesValue !== undefined) return { key, type: 'binary', value: value.bytesValue };
  return { key, type: 'string', value: JSON.stringify(plain(value)) };
}

function micros(nanos: string | number): number {
  return Number(BigInt(nanos) / 1000n);
}

/** Jaeger's duration: the span's own, in nanoseconds, truncated to the microsecond (not the end truncated minus the start truncated). */
function durationMicros(startNanos: string | number, endNanos: string | number): number {
  return Number((BigInt(endNanos) - BigInt(startNanos)) / 1000n);
}

export function otlpToJaeger(requests: OtlpJson[]) {
  const traces = new Map<
    string,
    { traceID: string; spans: unknown[]; processes: Record<string, unknown>; warnings: null; processKeys: Map<string, string> }
  >();
  for (const request of requests) {
    for (const rs of request.resourceSpans) {
      const resourceAttrs = rs.resource?.attributes ?? [];
      const service = resourceAttrs.find((kv) => kv.key === 'service.name')?.value.stringValue ?? 'unknown_service';
      const process = {
        serviceName: service,
        tags: resourceAttrs.filter((kv) => kv.key !== 'service.name').map((kv) => toTag(kv.key, kv.value)),
      };
      const processKey = JSON.stringify(process);
      for (const ss of rs.scopeSpans ?? []) {
        for (const span of ss.spans ?? []) {
          let trace = traces.get(span.traceId);
          if (trace === undefined) {
            trace = { traceID: span.traceId, spans: [], processes: {}, warnings: null, processKeys: new Map() };
            traces.set(span.traceId, trace);
          }
          let processID = trace.processKeys.get(processKey);
          if (processID === undefined) {
            processID = `p${trace.processKeys.size + 1}`;
            trace.processKeys.set(processKey, processID);
            trace.processes[processID] = process;
          }
          const tags: JaegerTagOut[] = [];
          if (ss.scope?.name) tags.push({ key: 'otel.scope.name', type: 'string', value: ss.scope.name });
          if (ss.scope?.version) tags.push({ key: 'otel.scope.version', type: 'string', value: ss.scope.version });
          for (const kv of span.attributes ?? []) tags.push(toTag(kv.key, kv.value));
          const kindTag = KIND_TAG[span.kind ?? 0];
          if (kindTag !== undefined) tags.push({ key: 'span.kind', type: 'string', value: kindTag });
          if (span.status?.code === 2) {
            tags.push({ key: 'otel.status_code', type: 'string', value: 'ERROR' });
            tags.push({ key: 'error', type: 'bool', value: true });
            if (span.status.message) tags.push({ key: 'otel.status_description', type: 'string', value: span.status.message });
          } else if (span.status?.code === 1) {
            tags.push({ key: 'otel.status_code', type: 'string', value: 'OK' });
          }
          const references = [];
          if (span.parentSpanId) references.push({ refType: 'CHILD_OF', traceID: span.traceId, spanID: span.parentSpanId });
          for (const link of span.links ?? []) {
            references.push({ refType: 'FOLLOWS_FROM', traceID: link.traceId, spanID: link.spanId });
          }
          const start = micros(span.startTimeUnixNano);
          trace.spans.push({
            traceID: span.traceId,
            spanID: span.spanId,
            operationName: span.name,
            references,
            startTime: start,
            duration: durationMicros(span.startTimeUnixNano, span.endTimeUnixNano),
            tags,
            logs: (span.events ?? []).map((event) => ({
              timestamp: micros(event.timeUnixNano),
              fields: [
                { key: 'event', type: 'string', value: event.name },
                ...(event.attributes ?? []).map((kv) => toTag(kv.key, kv.value)),
              ],
            })),
            processID,
            warnings: null,
          });
        }
      }
    }
  }
  return {
    data: [...traces.values()].map(({ processKeys: _keys, ...trace }) => trace),
    total: 0,
    limit: 0,
    offset: 0,
    errors: null,
  };
}
