import { LineageInputError } from './input-error';
import { isJaegerAnswer, type JaegerAnswer } from './jaeger';

/** A Jaeger answer larger than this is refused rather than buffered. */
const MAX_RESPONSE_BYTES = 256 * 1024 * 1024;

export interface JaegerReply {
  url: string;
  status: number;
  /** The parsed body when it has Jaeger's `{"data": ...}` shape. */
  answer: JaegerAnswer | undefined;
}

/** The base URL without trailing slashes; anything that is not http(s) with a host is refused. */
export function jaegerBase(source: string): string {
  let url: URL;
  try {
    url = new URL(source);
  } catch {
    throw new LineageInputError(`${source} is not a valid URL`);
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '') {
    throw new LineageInputError(`${source} is not an http(s) URL of a Jaeger query service`);
  }
  return source.replace(/\/+$/, '');
}

/** A failed fetch or read: past `timeoutMs` it says so, else `failed` and why. */
function fetchError(err: unknown, base: string, timeoutMs: number, whatLate: string, failed: string): LineageInputError {
  if ((err as Error).name === 'TimeoutError') return new LineageInputError(`Jaeger at ${base} ${whatLate} within ${timeoutMs} ms`);
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  const why = cause?.code !== undefined ? `${cause.code}${cause.message ? ` (${cause.message})` : ''}` : (cause?.message ?? (err as Error).message ?? String(err));
  return new LineageInputError(`${failed}: ${why}`);
}

/** GETs one path of Jaeger's query API. Network failures, timeouts and oversized answers throw; statuses are the caller's. */
export async function jaegerGet(base: string, path: string, timeoutMs: number): Promise<JaegerReply> {
  const url = `${base}${path}`;
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), headers: { accept: 'application/json' } });
  } catch (err) {
    throw fetchError(err, base, timeoutMs, 'did not answer', `cannot reach Jaeger at ${base}`);
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
    throw fetchError(err, base, timeoutMs, 'did not finish its answer', `reading Jaeger's answer from ${url} failed`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    // The caller reports a missing answer together with the status code, which says more.
  }
  return { url, status: response.status, answer: isJaegerAnswer(parsed) ? parsed : undefined };
}

/** Jaeger's first error message in an answer, between `before` and `after`; empty when it gave none. */
export function firstJaegerError(reply: JaegerReply, before = ': ', after = ''): string {
  const msg = reply.answer?.errors?.[0]?.msg;
  return msg ? `${before}${msg}${after}` : '';
}
