import { describe, expect, it } from 'vitest';
import { Metadata } from '@grpc/grpc-js';
import { refusalClaimOf, refusalDetails } from '../../instrumentation/grpc/refusal';

function status(code: number, details: string, marker: string[] | undefined = ['1']) {
  const metadata = new Metadata();
  for (const value of marker ?? []) metadata.add('x-deadline-expired', value);
  return { code, details, metadata };
}

// The refusal status message: our server writes it, our client reads it back as a claim.
describe('refusal status codec', () => {
  it.each([
    [{ code: 'DEADLINE_EXCEEDED' as const }],
    [{ code: 'INSUFFICIENT_BUDGET' as const, neededMs: 50, remainingMs: 12 }],
    [{ code: 'INSUFFICIENT_BUDGET' as const, neededMs: 12.5, remainingMs: 0 }],
  ])('round-trips %o', (claim) => {
    expect(refusalClaimOf(status(4, refusalDetails(claim)))).toEqual(claim);
  });

  it('writes whole milliseconds left', () => {
    expect(refusalDetails({ code: 'INSUFFICIENT_BUDGET', neededMs: 50, remainingMs: 12.9 })).toBe(
      'otel-deadline refused the call: 12 ms left on arrival, below minUsefulMs 50 (INSUFFICIENT_BUDGET)',
    );
  });

  const exceeded = refusalDetails({ code: 'DEADLINE_EXCEEDED' });
  it.each([
    ['another status code', status(14, exceeded)],
    ['no marker trailer', status(4, exceeded, [])],
    ['a marker other than 1', status(4, exceeded, ['true'])],
    ['two markers', status(4, exceeded, ['1', '1'])],
    ['no trailers at all', { code: 4, details: exceeded, metadata: null }],
    ['another message', status(4, 'Deadline exceeded')],
    ['our message with text after it', status(4, `${exceeded} (really)`)],
    ['a number past 100 days', status(4, 'otel-deadline refused the call: 999999999999 ms left on arrival, below minUsefulMs 50 (INSUFFICIENT_BUDGET)')],
    ['a negative number', status(4, 'otel-deadline refused the call: -1 ms left on arrival, below minUsefulMs 50 (INSUFFICIENT_BUDGET)')],
    ['an oversized message', status(4, exceeded + ' '.repeat(10_000))],
  ])('is not a refusal: %s', (_name, candidate) => {
    expect(refusalClaimOf(candidate as never)).toBeUndefined();
  });
});
