import { isRejectValue, type RejectClaim } from '../call/reject-claim';
import { MAX_DEADLINE_MS } from '../../src/time';
import type { ResolvedConfig } from '../config';
import type { ReplyInfo } from '../types';

/**
 * Early-reject replies as evidence. A reply is taken as "the server refused
 * this request before running anything" only when all of these hold:
 * - the peer is trusted (`trustReply`; by default every peer, or only the
 *   `propagateTo` hosts when that list is set);
 * - the status is the refusal status (`rejectStatusCode`, 504 by default:
 *   the same setting the server side answers with), so a 2xx never is one;
 * - `x-deadline-expired` is exactly `1`;
 * - the body is declared with a content-length of at most MAX_REPLY_BODY_BYTES
 *   and is one of the two bodies a server writes, with numbers in range.
 * Anything else is an ordinary response and is returned as it is.
 */

/** Early-reject bodies are a few dozen bytes; anything larger is not one. */
export const MAX_REPLY_BODY_BYTES = 1024;

/** What a body read left: the bytes read, and the error that stopped it, if any. */
export interface ReadResult {
  bytes: Buffer;
  error?: unknown;
}

/** Reads a small body whole (its declared length was checked by `claimsEarlyReject`). */
export async function readSmallBody(body: AsyncIterable<Uint8Array | string> | null | undefined): Promise<ReadResult> {
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
    // Names are Buffers here: compare lengths before making strings of them.
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

/**
 * What the headers of a reply must show before its body is worth reading:
 * the refusal status, the marker, a small declared body, and a trusted peer
 * (asked last: it runs the user's hook). `info` is built only then: every
 * reply passes through here, and its URL costs string work that almost none
 * of them need.
 */
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

