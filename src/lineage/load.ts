import { readFile } from 'node:fs/promises';
import { groupTraces, sameTraceId, type LineageSpan, type LineageTrace } from './model';
import { isOtlpRequest, spansFromOtlp } from './otlp';
import { isJaegerAnswer, isJaegerTrace, spansFromJaeger } from './jaeger';
import { firstJaegerError, jaegerBase, jaegerGet } from './jaeger-http';
import { LineageInputError } from './input-error';

export { LineageInputError };

export interface LoadOptions {
  /** Keep only this trace; an error names the ids present when it is missing. */
  traceId?: string;
  /** For a Jaeger URL: how long to wait for the answer. Default 10 000 ms. */
  timeoutMs?: number;
}

export function isUrl(source: string): boolean {
  return /^https?:\/\//i.test(source);
}

/** Reads traces from a file (Jaeger API answer, OTLP/JSON, or its JSON lines) or from a Jaeger query URL. */
export async function loadTraces(source: string, options: LoadOptions = {}): Promise<LineageTrace[]> {
  const traces = isUrl(source) ? await fetchJaeger(source, options) : await readTraceFile(source);
  return pickTrace(traces, options.traceId, source);
}

export function pickTrace(traces: LineageTrace[], traceId: string | undefined, source: string): LineageTrace[] {
  if (traces.length === 0) throw new LineageInputError(`${source} holds no spans`);
  if (traceId === undefined) return traces;
  const picked = traces.filter((t) => sameTraceId(t.traceId, traceId));
  if (picked.length === 0) {
    const ids = traces.slice(0, 10).map((t) => t.traceId);
    const more = traces.length > 10 ? `, and ${traces.length - 10} more` : '';
    throw new LineageInputError(`trace ${traceId} is not in ${source}; it holds ${ids.join(', ')}${more}`);
  }
  return picked;
}

const READ_ERRORS: Record<string, string> = { ENOENT: 'no such file', EACCES: 'permission denied', EISDIR: 'it is a directory' };

async function readTraceFile(path: string): Promise<LineageTrace[]> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new LineageInputError(`cannot read ${path}: ${READ_ERRORS[code ?? ''] ?? String(code ?? (err as Error).message)}`);
  }
  return groupTraces(parseTraceText(text, path));
}

/** Parses file content of any supported format. Exported for tests and the demo. */
export function parseTraceText(text: string, name: string): LineageSpan[] {
  if (text.trim() === '') throw new LineageInputError(`${name} is empty`);
  let whole: unknown;
  let wholeError: Error | undefined;
  try {
    whole = JSON.parse(text);
  } catch (err) {
    wholeError = err as Error;
  }
  if (wholeError === undefined) return spansFromDocument(whole, name);

  // Not one document: try JSON lines (the collector file exporter's format).
  const lines = text.split('\n');
  const spans: LineageSpan[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (line === '') continue;
    let doc: unknown;
    try {
      doc = JSON.parse(line);
    } catch (err) {
      // A single document that spans several lines failed as a whole: report that error.
      if (i === 0 && !line.endsWith('}')) throw new LineageInputError(`${name} is not valid JSON: ${wholeError.message}`);
      throw new LineageInputError(`${name} is not valid JSON: line ${i + 1}: ${(err as Error).message}`);
    }
    if (!isOtlpRequest(doc)) {
      throw new LineageInputError(`${name}: line ${i + 1} is not an OTLP/JSON request (no "resourceSpans")`);
    }
    spans.push(...spansFromOtlp(doc));
  }
  return spans;
}

function spansFromDocument(doc: unknown, name: string): LineageSpan[] {
  if (isJaegerAnswer(doc)) return spansFromJaeger(doc);
  if (isOtlpRequest(doc)) return spansFromOtlp(doc);
  if (isJaegerTrace(doc)) return spansFromJaeger({ data: [doc] });
  throw new LineageInputError(
    `${name} is neither a Jaeger API answer ({"data":[...]}) nor OTLP/JSON ({"resourceSpans":[...]})`,
  );
}

async function fetchJaeger(source: string, options: LoadOptions): Promise<LineageTrace[]> {
  const { traceId } = options;
  if (traceId === undefined || traceId === '') {
    throw new LineageInputError('a Jaeger URL needs a trace id (--trace <id>) or a service to search (--service <name>)');
  }
  if (!/^[0-9a-fA-F]{1,32}$/.test(traceId)) {
    throw new LineageInputError(`trace id ${JSON.stringify(traceId)} is not 1 to 32 hex digits`);
  }
  const base = jaegerBase(source);
  const reply = await jaegerGet(base, `/api/traces/${traceId.toLowerCase()}`, options.timeoutMs ?? 10_000);
  const { answer } = reply;
  if (reply.status === 404 || (answer !== undefined && (answer.data ?? []).length === 0)) {
    throw new LineageInputError(`trace ${traceId} not found at ${base}${firstJaegerError(reply, ' (', ')')}`);
  }
  if (reply.status < 200 || reply.status > 299) {
    throw new LineageInputError(`Jaeger at ${base} answered HTTP ${reply.status}${firstJaegerError(reply)}`);
  }
  if (answer === undefined) {
    throw new LineageInputError(`${reply.url} did not return a Jaeger API answer ({"data":[...]})`);
  }
  return groupTraces(spansFromJaeger(answer));
}
