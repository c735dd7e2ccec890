import type { ServerResponse } from 'node:http';
import { HEADER_DEADLINE_EXPIRED } from '../names';
import type { RejectCode } from './admission';

/**
 * Answers a request that arrived with too little time left. The body is a
 * fixed, small JSON object: the code, plus for INSUFFICIENT_BUDGET the two
 * numbers the client needs to build the same error.
 */
export function writeRejectReply(
  response: ServerResponse,
  status: number,
  code: RejectCode,
  neededMs: number,
  remainingMs: number,
): void {
  if (response.headersSent || response.writableEnded) return;
  const body = JSON.stringify(
    code === 'INSUFFICIENT_BUDGET' ? { code, neededMs, remainingMs: Math.floor(remainingMs) } : { code },
  );
  response.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    [HEADER_DEADLINE_EXPIRED]: '1',
  });
  response.end(body);
}
