import { Readable } from 'node:stream';

type BodyClass = new (options: { resume(): void; abort(): void; contentType?: string; contentLength?: number }) => unknown;

/**
 * A fresh body holding `bytes`, for an undici response whose early-reject claim
 * we read and did not believe. Built with the body's own class (undici's
 * BodyReadable, so `.text()` and friends work), else a plain Readable; a read
 * that stopped on an error gives a body that fails with it when read.
 */
export function replayBody(original: object, bytes: Buffer, error: unknown, contentType: unknown): Readable {
  // Failed when read, not now: an 'error' before the caller listens would end the process.
  const read = function (this: Readable) {
    if (error !== undefined) process.nextTick(() => this.destroy(error as Error));
  };
  let body: unknown;
  try {
    const Class = original.constructor as BodyClass;
    body = new Class({ resume: read, abort() {}, contentType: typeof contentType === 'string' ? contentType : '', contentLength: bytes.length });
  } catch {
    body = undefined;
  }
  const replay = body instanceof Readable ? body : new Readable({ read });
  if (error !== undefined) return replay;
  if (bytes.length > 0) replay.push(bytes);
  replay.push(null);
  return replay;
}
