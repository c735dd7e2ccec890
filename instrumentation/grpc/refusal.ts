import { HEADER_DEADLINE_EXPIRED } from '../../src/attributes';
import { MAX_DEADLINE_MS } from '../../src/time';
import type { RejectClaim } from '../call/reject-claim';
import { isRejectValue } from '../call/reject-claim';
import { GRPC_DEADLINE_EXCEEDED, type GrpcStatus } from './grpc-types';

/**
 * The status message of a server refusal, both ways: the server writes it,
 * a client reads it back as a claim. It names the refusal and the numbers
 * behind it, never caller data. Pure; parsing never throws.
 */
const PREFIX = 'otel-deadline refused the call: ';
const EXCEEDED = `${PREFIX}its deadline had passed on arrival (DEADLINE_EXCEEDED)`;
const INSUFFICIENT = /^otel-deadline refused the call: (\d{1,15}) ms left on arrival, below minUsefulMs (\d{1,15}(?:\.\d{1,6})?) \(INSUFFICIENT_BUDGET\)$/;

export function refusalDetails(claim: RejectClaim): string {
  if (claim.code === 'DEADLINE_EXCEEDED') return EXCEEDED;
  return `${PREFIX}${Math.floor(claim.remainingMs)} ms left on arrival, below minUsefulMs ${claim.neededMs} (INSUFFICIENT_BUDGET)`;
}

function bounded(text: string): number | undefined {
  const value = Number(text);
  return Number.isFinite(value) && value <= MAX_DEADLINE_MS ? value : undefined;
}

/**
 * The refusal a status claims, if it is one exactly as our server writes it:
 * DEADLINE_EXCEEDED, the trailer `x-deadline-expired: 1`, and one of the two
 * messages with numbers in range. Whether to believe it is the caller's call
 * (`trustReply`). Anything else is an ordinary status.
 */
export function refusalClaimOf(status: GrpcStatus): RejectClaim | undefined {
  if (status.code !== GRPC_DEADLINE_EXCEEDED || typeof status.details !== 'string' || status.details.length > 256) return undefined;
  const marker = status.metadata?.get(HEADER_DEADLINE_EXPIRED);
  if (marker === undefined || !isRejectValue(marker)) return undefined;
  if (status.details === EXCEEDED) return { code: 'DEADLINE_EXCEEDED' };
  const match = INSUFFICIENT.exec(status.details);
  if (match === null) return undefined;
  const remainingMs = bounded(match[1]);
  const neededMs = bounded(match[2]);
  return remainingMs === undefined || neededMs === undefined ? undefined : { code: 'INSUFFICIENT_BUDGET', neededMs, remainingMs };
}
