import { MAX_REPLY_BODY_BYTES, parseRejectBody } from './reply';

type Handler = (this: unknown, ...args: unknown[]) => unknown;
interface WatchedRequest {
  onData?: Handler;
  onComplete?: Handler;
}

/**
 * Watches the body undici receives for one request whose reply headers claim
 * an early reject, and calls `onClaim` on completion if the body is a
 * well-formed one: before the transport's span ends and the caller reads it.
 */
export function watchRejectBody(request: object, onClaim: () => void): void {
  const watched = request as WatchedRequest;
  const { onData, onComplete } = watched;
  if (typeof onData !== 'function' || typeof onComplete !== 'function') return;
  let chunks: Buffer[] | undefined = [];
  let size = 0;
  watched.onData = function (this: unknown, chunk: unknown) {
    if (chunks !== undefined) {
      const bytes = Buffer.from(chunk as Uint8Array);
      size += bytes.length;
      if (size > MAX_REPLY_BODY_BYTES) chunks = undefined;
      else chunks.push(bytes);
    }
    return onData.call(this, chunk);
  };
  watched.onComplete = function (this: unknown, ...args: unknown[]) {
    if (chunks !== undefined && parseRejectBody(Buffer.concat(chunks)) !== undefined) onClaim();
    chunks = undefined;
    return onComplete.apply(this, args);
  };
}
