import { Readable } from 'node:stream';

type BodyClass = new (options: { resume(): void; abort(): void; contentType?: string; contentLength?: number }) => unknown;

/**
 * A fresh body holding `bytes`, for an undici response whose body we read to
 * check an early-reject claim and then did not believe: the caller gets the
 * response as it came. Built with the body's own class (undici's
 * BodyReadable, so `.text()`, `.json()` and friends work; its constructor
 * options are the same in undici 6 and 7), else a plain Readable. A read that
 * stopped on an error gives a body that fails with that error when read.
 */
export function replayBody(original: object, bytes: Buffer, error: unknown, contentType: unknown): Readable {
  // A read that stopped on an error fails the replay once someone reads it, not
  // now: destroyed at once, it would emit 'error' before the caller could
  // listen, and an 'error' nobody listens to ends the process. (Node calls a
  // stream's `read` option, and so undici's `resume`, with the stream as `this`.)
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
