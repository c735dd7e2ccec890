import type { ServerResponse } from 'node:http';
import type { RejectClaim } from '../call/reject-claim';
import { HEADER_DEADLINE_EXPIRED } from '../names';

/**
 * Answers a request that arrived with too little time left. The body is a
 * fixed, small JSON object: the code, plus for INSUFFICIENT_BUDGET the two
 * numbers the client needs to build the same error.
 */
export function writeRejectReply(response: ServerResponse, status: number, claim: RejectClaim): void {
  if (response.headersSent || response.writableEnded) return;
  const body = JSON.stringify(claim.code === 'INSUFFICIENT_BUDGET' ? { ...claim, remainingMs: Math.floor(claim.remainingMs) } : claim);
  response.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    [HEADER_DEADLINE_EXPIRED]: '1',
  });
  response.end(body);
}
