import { isRejectValue, type RejectClaim } from '../call/reject-claim';
import { MAX_DEADLINE_MS } from '../../src/time';
import type { ResolvedConfig } from '../config';
import type { ReplyInfo } from '../types';

/**
 * Early-reject replies as evidence: a reply means "the server refused this
 * request before running anything" only from a trusted peer (`trustReply`),
 * with the refusal status (`rejectStatusCode`), `x-deadline-expired: 1`, and a
 * small declared body that is one of the two a server writes. Anything else
 * is an ordinary response.
 */

/** Early-reject bodies are a few dozen bytes; anything larger is not one. */
export const MAX_REPLY_BODY_BYTES = 1024;

/** Reads a small body whole (its declared length was checked by `claimsEarlyReject`), with the error that stopped it, if any. */
export async function readSmallBody(body: AsyncIterable<Uint8Array | string> | null | undefined): Promise<{ bytes: Buffer; error?: unknown }> {
  const chunks: Buffer[] = [];
  if (body == null) return { bytes: Buffer.alloc(0) };
  let size = 0;
  try {
    for await (const chunk of body) {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
      chunks.push(bytes);
      size += bytes.length;
      // A server that sends more than it declared is not one of ours.
      if (size > MAX_REPLY_BODY_BYTES) break;
    }
  } catch (error) {
    return { bytes: Buffer.concat(chunks), error };
  }
  return { bytes: Buffer.concat(chunks) };
}

/** The value of `name` in undici's raw response headers (`[name, value, ...]`, Buffers or strings). */
export function rawHeader(raw: readonly unknown[] | undefined, name: string): string | undefined {
  if (!Array.isArray(raw)) return undefined;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const key = raw[i] as { length?: unknown } | null | undefined;
    if (key?.length !== name.length) continue;
    if (String(key).toLowerCase() === name) return String(raw[i + 1]);
  }
  return undefined;
}

function declaredSmall(contentLength: unknown): boolean {
  const text = Array.isArray(contentLength) ? contentLength[0] : contentLength;
  if (typeof text !== 'string' || !/^\s*\d{1,4}\s*$/.test(text)) return false;
  const length = Number(text);
  return length > 0 && length <= MAX_REPLY_BODY_BYTES;
}

/** Whether a reply's headers make its body worth reading; the peer is asked last (the user's hook, with `info` built only then). */
export function claimsEarlyReject(settings: ResolvedConfig, statusCode: number, marker: unknown, contentLength: unknown, info: () => ReplyInfo): boolean {
  return statusCode === settings.rejectStatusCode && isRejectValue(marker) && declaredSmall(contentLength) && settings.trustsReply(info());
}

function boundedMs(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 && value <= MAX_DEADLINE_MS ? value : undefined;
}

/** The claim of a well-formed early-reject body, or undefined for anything else. Never throws. */
export function parseRejectBody(body: Buffer | string | undefined): RejectClaim | undefined {
  if (body === undefined || body.length === 0 || body.length > MAX_REPLY_BODY_BYTES) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(String(body));
  } catch {
    return undefined;
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return undefined;
  const fields = parsed as Record<string, unknown>;
  const keys = Object.keys(fields).sort().join(',');
  if (fields.code === 'DEADLINE_EXCEEDED' && keys === 'code') return { code: 'DEADLINE_EXCEEDED' };
  if (fields.code !== 'INSUFFICIENT_BUDGET' || keys !== 'code,neededMs,remainingMs') return undefined;
  const neededMs = boundedMs(fields.neededMs);
  const remainingMs = boundedMs(fields.remainingMs);
  if (neededMs === undefined || remainingMs === undefined) return undefined;
  return { code: 'INSUFFICIENT_BUDGET', neededMs, remainingMs };
}

