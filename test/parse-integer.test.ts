import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseIntegerMs, smallestBaggageMs } from '../src/propagation/parse';

// parseIntegerMs reads whole milliseconds: it must
// agree with Number() on every value it accepts, and accept nothing else.
describe('parseIntegerMs', () => {
  it.each(['0', '7', '00042', '1796342400123', '999999999999999', '900719925474099'])('reads %s as Number() does', (text) => {
    expect(parseIntegerMs(text)).toBe(Number(text));
  });

  it.each(['', '1'.repeat(16), '12a', '/1', ':1', ' 1', '1.0', '-1', '+1', '١'])('refuses %j', (text) => {
    expect(parseIntegerMs(text)).toBeUndefined();
  });

  it('agrees with "1 to 15 ASCII digits, then Number()" on any text', () => {
    const digitsOrNot = fc.oneof(fc.string({ maxLength: 18 }), fc.stringMatching(/^[0-9]{0,17}$/), fc.stringMatching(/^[ 0-9:/a]{1,16}$/));
    fc.assert(
      fc.property(digitsOrNot, (text) => {
        expect(parseIntegerMs(text)).toBe(/^[0-9]{1,15}$/.test(text) ? Number(text) : undefined);
      }),
      { numRuns: 2_000 },
    );
  });

  it('reads an epoch cutoff from the usual baggage header exactly', () => {
    expect(smallestBaggageMs('deadline.at_ms=1796342400123', 'deadline.at_ms')).toBe(1_796_342_400_123);
    expect(smallestBaggageMs(['deadline.at_ms=1796342400123'], 'deadline.at_ms')).toBe(1_796_342_400_123);
  });
});
