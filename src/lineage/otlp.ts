import type { LineageSpan, TagValue } from './model';

/** Reads OTLP/JSON trace data, strict encoding or the looser forms SDKs emit (ints as numbers, kind by name). */

interface OtlpAnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: string | number;
  doubleValue?: number | string;
  bytesValue?: string;
  arrayValue?: { values?: OtlpAnyValue[] };
  kvlistValue?: { values?: OtlpKeyValue[] };
}

interface OtlpKeyValue {
  key: string;
  value?: OtlpAnyValue;
}

interface OtlpSpan {
  traceId?: string;
  spanId?: string;
  parentSpanId?: string;
  name?: string;
  kind?: number | string;
  startTimeUnixNano?: string | number;
  endTimeUnixNano?: string | number;
  attributes?: OtlpKeyValue[];
}

export interface OtlpRequest {
  resourceSpans?: {
    resource?: { attributes?: OtlpKeyValue[] };
    scopeSpans?: { spans?: OtlpSpan[] }[];
  }[];
}

const KINDS = ['internal', 'internal', 'server', 'client', 'producer', 'consumer'];

function kindOf(kind: number | string | undefined): string {
  const name = typeof kind === 'number' ? KINDS[kind] : typeof kind === 'string' ? kind.replace(/^SPAN_KIND_/, '').toLowerCase() : undefined;
  return name !== undefined && KINDS.includes(name) ? name : 'internal';
}

/** JSON-friendly form of structured values, as Jaeger also renders them. */
function plain(value: OtlpAnyValue | undefined): unknown {
  if (value === undefined || value === null) return null;
  if (value.arrayValue !== undefined) return (value.arrayValue.values ?? []).map(plain);
  if (value.kvlistValue !== undefined) {
    return Object.fromEntries((value.kvlistValue.values ?? []).map((kv) => [kv.key, plain(kv.value)]));
  }
  return anyValue(value) ?? null;
}

export function anyValue(value: OtlpAnyValue | undefined): TagValue | undefined {
  if (value === undefined || value === null || typeof value !== 'object') return undefined;
  if (value.stringValue !== undefined) return String(value.stringValue);
  if (value.boolValue !== undefined) return value.boolValue === true;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return Number(value.doubleValue);
  if (value.bytesValue !== undefined) return String(value.bytesValue);
  if (value.arrayValue !== undefined || value.kvlistValue !== undefined) return JSON.stringify(plain(value));
  return undefined;
}

export function attributesOf(list: OtlpKeyValue[] | undefined): Record<string, TagValue> {
  const out: Record<string, TagValue> = {};
  for (const kv of list ?? []) {
    const value = anyValue(kv?.value);
    if (typeof kv?.key === 'string' && value !== undefined) out[kv.key] = value;
  }
  return out;
}

/** Nanoseconds since the epoch, exact for strings; undefined if not a count (over 20 digits is not parsed). */
function nanosOf(value: string | number | undefined): bigint | undefined {
  if (typeof value === 'string' && /^\d{1,20}$/.test(value)) return BigInt(value);
  if (typeof value === 'number' && Number.isFinite(value) && value >= 0) return BigInt(Math.trunc(value));
  return undefined;
}

/** Start and end in whole microseconds by Jaeger's rule, so both sources read the same. */
function spanTimesUs(startNanos: string | number | undefined, endNanos: string | number | undefined): { startUs: number; endUs: number } {
  const start = nanosOf(startNanos) ?? 0n;
  const end = nanosOf(endNanos) ?? start;
  const startUs = Number(start / 1000n);
  return { startUs, endUs: startUs + (end > start ? Number((end - start) / 1000n) : 0) };
}

/** Ids are hex in OTLP/JSON; an empty or all-zero parent id means "no parent". */
function idOf(id: string | undefined): string | undefined {
  if (typeof id !== 'string' || id === '' || /^0+$/.test(id)) return undefined;
  return id.toLowerCase();
}

export function isOtlpRequest(value: unknown): value is OtlpRequest {
  return typeof value === 'object' && value !== null && Array.isArray((value as OtlpRequest).resourceSpans);
}

export function spansFromOtlp(request: OtlpRequest): LineageSpan[] {
  const spans: LineageSpan[] = [];
  for (const resourceSpans of request.resourceSpans ?? []) {
    const resource = attributesOf(resourceSpans?.resource?.attributes);
    const service = typeof resource['service.name'] === 'string' ? resource['service.name'] : 'unknown_service';
    for (const scopeSpans of resourceSpans?.scopeSpans ?? []) {
      for (const span of scopeSpans?.spans ?? []) {
        const traceId = idOf(span?.traceId);
        const spanId = idOf(span?.spanId);
        if (traceId === undefined || spanId === undefined) continue;
        const { startUs, endUs } = spanTimesUs(span.startTimeUnixNano, span.endTimeUnixNano);
        spans.push({
          traceId,
          spanId,
          parentSpanId: idOf(span.parentSpanId),
          service,
          name: typeof span.name === 'string' ? span.name : '',
          kind: kindOf(span.kind),
          startUs,
          endUs,
          attributes: attributesOf(span.attributes),
        });
      }
    }
  }
  return spans;
}
