import type { Deadline } from '../../src/deadline';
import { DeadlineExceededError, InsufficientBudgetError } from '../../src/errors';
import { HEADER_DEADLINE_EXPIRED } from '../names';

/** Early-reject bodies are a few dozen bytes; anything larger is not read. */
export const MAX_REPLY_BODY_BYTES = 1024;

/**
 * Reads at most MAX_REPLY_BODY_BYTES of a reply body; a larger or failing body
 * yields undefined. Leaving the loop early closes the stream.
 */
export async function readSmallBody(body: AsyncIterable<Uint8Array | string> | null | undefined): Promise<string | undefined> {
  if (body == null) return undefined;
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of body) {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
      size += bytes.length;
      if (size > MAX_REPLY_BODY_BYTES) return undefined;
      chunks.push(bytes);
    }
  } catch {
    return undefined;
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** True for undici's raw response headers (`[name, value, ...]` as Buffers or strings) of an early-reject reply. */
export function isRejectReplyRaw(raw: readonly unknown[] | undefined): boolean {
  if (!Array.isArray(raw)) return false;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i] as { length?: unknown } | null | undefined;
    // Names are Buffers here: compare lengths before making strings of them.
    if (name?.length !== HEADER_DEADLINE_EXPIRED.length) continue;
    if (String(name).toLowerCase() === HEADER_DEADLINE_EXPIRED) return String(raw[i + 1]).trim() === '1';
  }
  return false;
}

/** True for a header value (node:http, undici `request`, fetch `Headers.get`) of an early-reject reply. */
export function isRejectValue(value: unknown): boolean {
  if (Array.isArray(value)) return value.some(isRejectValue);
  return typeof value === 'string' && value.trim() === '1';
}

/**
 * The error a client raises for a server's early-reject reply. The body says
 * which refusal it was; a body that is missing or unreadable counts as an
 * exceeded deadline.
 */
export function errorFromReply(operation: string, deadline: Deadline, body: string | undefined): Error {
  let parsed: { code?: unknown; neededMs?: unknown; remainingMs?: unknown } = {};
  try {
    if (body !== undefined && body.length <= MAX_REPLY_BODY_BYTES) parsed = JSON.parse(body) ?? {};
  } catch {
    // Not ours, or truncated: fall through to the exceeded error.
  }
  if (parsed.code === 'INSUFFICIENT_BUDGET') {
    const needed = typeof parsed.neededMs === 'number' && parsed.neededMs >= 0 ? parsed.neededMs : 0;
    const remaining = typeof parsed.remainingMs === 'number' && parsed.remainingMs >= 0 ? parsed.remainingMs : deadline.remainingMs();
    return new InsufficientBudgetError(`${operation} (rejected by the server)`, needed, remaining);
  }
  return new DeadlineExceededError(`${operation} (rejected by the server)`, deadline.expiresAtMs);
}
