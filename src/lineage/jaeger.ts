import type { LineageSpan, TagValue } from './model';

/** Reads Jaeger's query API answer, `{"data":[{"traceID","spans","processes"}]}`; big int64 tags arrive as strings. */

export interface JaegerTag {
  key: string;
  type?: string;
  value: unknown;
}

interface JaegerSpan {
  traceID?: string;
  spanID?: string;
  operationName?: string;
  references?: { refType?: string; traceID?: string; spanID?: string }[];
  startTime?: number;
  duration?: number;
  tags?: JaegerTag[];
  processID?: string;
  process?: { serviceName?: string };
}

export interface JaegerTrace {
  traceID?: string;
  spans?: JaegerSpan[];
  processes?: Record<string, { serviceName?: string }>;
}

export interface JaegerAnswer {
  data?: JaegerTrace[] | null;
  errors?: { code?: number; msg?: string }[] | null;
}

export function isJaegerAnswer(value: unknown): value is JaegerAnswer {
  if (typeof value !== 'object' || value === null || !('data' in value)) return false;
  const data = (value as JaegerAnswer).data;
  return data === null || Array.isArray(data);
}

/** One trace on its own, as in Jaeger UI's JSON model (`{"traceID","spans","processes"}`). */
export function isJaegerTrace(value: unknown): value is JaegerTrace {
  return typeof value === 'object' && value !== null && Array.isArray((value as JaegerTrace).spans);
}

function tagValue({ type, value }: JaegerTag): TagValue | undefined {
  if (type === 'bool') return value === true || value === 'true';
  if (type === 'int64' || type === 'float64') return Number.isFinite(Number(value)) ? Number(value) : undefined;
  if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') return value;
  return value === undefined || value === null ? undefined : JSON.stringify(value);
}

function idOf(id: string | undefined): string | undefined {
  return typeof id === 'string' && id !== '' ? id.toLowerCase() : undefined;
}

/** The parent is the first CHILD_OF reference within the same trace. */
function parentOf(span: JaegerSpan, traceId: string): string | undefined {
  for (const ref of span.references ?? []) {
    if (ref?.refType === 'CHILD_OF' && idOf(ref.traceID) === traceId) return idOf(ref.spanID);
  }
  return undefined;
}

export function spansFromJaeger(answer: JaegerAnswer): LineageSpan[] {
  const spans: LineageSpan[] = [];
  for (const trace of answer.data ?? []) {
    const processes = trace?.processes ?? {};
    for (const span of trace?.spans ?? []) {
      const traceId = idOf(span?.traceID ?? trace.traceID);
      const spanId = idOf(span?.spanID);
      if (traceId === undefined || spanId === undefined) continue;
      const attributes: Record<string, TagValue> = {};
      for (const tag of span.tags ?? []) {
        const value = typeof tag?.key === 'string' ? tagValue(tag) : undefined;
        if (value !== undefined) attributes[tag.key] = value;
      }
      const kind = typeof attributes['span.kind'] === 'string' ? attributes['span.kind'] : 'internal';
      const service = span.process?.serviceName ?? processes[span.processID ?? '']?.serviceName ?? 'unknown_service';
      const startUs = Number(span.startTime) || 0;
      spans.push({
        traceId,
        spanId,
        parentSpanId: parentOf(span, traceId),
        service,
        name: typeof span.operationName === 'string' ? span.operationName : '',
        kind,
        startUs,
        endUs: startUs + Math.max(0, Number(span.duration) || 0),
        attributes,
      });
    }
  }
  return spans;
}
