import type { Readable } from 'node:stream';

/**
 * Reads the first `length` bytes of a response stream (what it had, if it ends
 * or fails early); `putBack()` unshifts them in the same turn, before 'end', so
 * a reader added afterwards gets the body from its first byte.
 */
export function peekBody(stream: Readable, length: number, done: (bytes: Buffer, putBack: () => void) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  let finished = false;
  const finish = () => {
    if (finished) return;
    finished = true;
    stream.removeListener('readable', onReadable);
    stream.removeListener('end', finish);
    stream.removeListener('error', finish);
    const bytes = Buffer.concat(chunks);
    done(bytes, () => {
      if (bytes.length > 0 && !stream.readableEnded && !stream.destroyed) stream.unshift(bytes);
    });
  };
  const onReadable = () => {
    let chunk: Buffer | null;
    while (size < length && (chunk = stream.read() as Buffer | null) !== null) {
      chunks.push(chunk);
      size += chunk.length;
    }
    if (size >= length) finish();
  };
  stream.on('readable', onReadable);
  stream.once('end', finish);
  stream.once('error', finish);
}
