import { readFile } from 'node:fs/promises';
import { groupTraces, sameTraceId, type LineageSpan, type LineageTrace } from './model';
import { isOtlpRequest, spansFromOtlp } from './otlp';
import { isJaegerAnswer, isJaegerTrace, spansFromJaeger, type JaegerAnswer } from './jaeger';

/** A problem with the user's input: printed as one line, never as a stack trace. */
export class LineageInputError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'LineageInputError';
  }
}

export interface LoadOptions {
  /** Keep only this trace; an error names the ids present when it is missing. */
  traceId?: string;
  /** For a Jaeger URL: how long to wait for the answer. Default 10 000 ms. */
  timeoutMs?: number;
}

/** A Jaeger answer larger than this is refused rather than buffered. */
const MAX_RESPONSE_BYTES = 256 * 1024 * 1024;

export function isUrl(source: string): boolean {
  return /^https?:\/\//i.test(source);
}

/**
 * Reads traces from a file (Jaeger API answer, OTLP/JSON request, or OTLP JSON
 * lines as the collector file exporter writes them) or from a Jaeger query URL.
 */
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

async function readTraceFile(path: string): Promise<LineageTrace[]> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why =
      code === 'ENOENT'
        ? 'no such file'
        : code === 'EACCES'
          ? 'permission denied'
          : code === 'EISDIR'
            ? 'it is a directory'
            : String(code ?? (err as Error).message);
    throw new LineageInputError(`cannot read ${path}: ${why}`);
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

function describeFetchError(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  if (cause?.code !== undefined) return `${cause.code}${cause.message ? ` (${cause.message})` : ''}`;
  return cause?.message ?? (err as Error).message ?? String(err);
}

async function fetchJaeger(base: string, options: LoadOptions): Promise<LineageTrace[]> {
  const { traceId } = options;
  if (traceId === undefined || traceId === '') {
    throw new LineageInputError('a Jaeger URL needs a trace id: add --trace <id>');
  }
  if (!/^[0-9a-fA-F]{1,32}$/.test(traceId)) {
    throw new LineageInputError(`trace id ${JSON.stringify(traceId)} is not 1 to 32 hex digits`);
  }
  const url = `${base.replace(/\/+$/, '')}/api/traces/${traceId.toLowerCase()}`;
  const timeoutMs = options.timeoutMs ?? 10_000;
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), headers: { accept: 'application/json' } });
  } catch (err) {
    if ((err as Error).name === 'TimeoutError') {
      throw new LineageInputError(`Jaeger at ${base} did not answer within ${timeoutMs} ms`);
    }
    throw new LineageInputError(`cannot reach Jaeger at ${base}: ${describeFetchError(err)}`);
  }
  const length = Number(response.headers.get('content-length'));
  if (length > MAX_RESPONSE_BYTES) {
    await response.body?.cancel();
    throw new LineageInputError(`Jaeger's answer from ${url} is too large (${length} bytes)`);
  }
  let text: string;
  try {
    text = await response.text();
  } catch (err) {
    throw new LineageInputError(`reading Jaeger's answer from ${url} failed: ${describeFetchError(err)}`);
  }
  let answer: JaegerAnswer | undefined;
  try {
    const parsed: unknown = JSON.parse(text);
    if (isJaegerAnswer(parsed)) answer = parsed;
  } catch {
    // Handled below with the status code, which says more than the parse error.
  }
  const firstError = answer?.errors?.[0]?.msg;
  if (response.status === 404 || (answer !== undefined && (answer.data ?? []).length === 0)) {
    throw new LineageInputError(`trace ${traceId} not found at ${base}${firstError ? ` (${firstError})` : ''}`);
  }
  if (!response.ok) {
    throw new LineageInputError(`Jaeger at ${base} answered HTTP ${response.status}${firstError ? `: ${firstError}` : ''}`);
  }
  if (answer === undefined) {
    throw new LineageInputError(`${url} did not return a Jaeger API answer ({"data":[...]})`);
  }
  return groupTraces(spansFromJaeger(answer));
}
