import { describe, expect, it } from 'vitest';
import { formatGrpcTimeout } from '../../instrumentation/grpc/timeout';
import { parseGrpcTimeout } from '../../src/propagation/parse';

// The grpc-timeout codec, one row per edge of the protocol's
// `TimeoutValue = 1*8DIGIT` and `TimeoutUnit = H / M / S / m / u / n`.
describe('parseGrpcTimeout', () => {
  it.each([
    ['1H', 3_600_000],
    ['2M', 120_000],
    ['3S', 3_000],
    ['250m', 250],
    ['500000u', 500],
    ['90000000n', 90],
    ['0m', 0],
    ['99999999m', 99_999_999],
    ['99999999H', 99_999_999 * 3_600_000],
    ['00000001S', 1_000],
  ])('reads %s as %d ms', (value, ms) => {
    expect(parseGrpcTimeout(value)).toBe(ms);
  });

  it.each([
    ['9 digits (over the protocol limit)', '123456789m'],
    ['no unit', '250'],
    ['unknown unit', '250s'],
    ['no digits', 'm'],
    ['negative', '-1S'],
    ['decimal', '1.5S'],
    ['space inside', '25 m'],
    ['leading space', ' 25m'],
    ['two values', '25m25m'],
    ['non-ASCII digits', '２５m'],
    ['empty', ''],
    ['huge', '9'.repeat(100_000) + 'm'],
  ])('ignores %s', (_name, value) => {
    expect(parseGrpcTimeout(value)).toBeUndefined();
  });
});

describe('formatGrpcTimeout', () => {
  it.each([
    [0, '0m'],
    [1, '1m'],
    [0.2, '1m'], // rounded up, as grpc-js does: never shorter than the budget
    [250, '250m'],
    [99_999_999, '99999999m'],
    [100_000_000, '100000S'], // 9 digits of ms: the next unit
    [99_999_999_000, '99999999S'],
    [99_999_999_001, '1666667M'],
    [99_999_999 * 3_600_000, '99999999H'],
    [1e300, '99999999H'], // the largest value the wire can carry
  ])('writes %d ms as %s', (ms, value) => {
    expect(formatGrpcTimeout(ms)).toBe(value);
  });

  it.each([[-1], [Number.NaN], [Infinity], [-Infinity]])('writes nothing for %d', (ms) => {
    expect(formatGrpcTimeout(ms)).toBeUndefined();
  });

  it('round-trips through the parser without shortening the budget', () => {
    for (const ms of [0, 1, 999, 1_000, 59_999, 60_000, 123_456_789, 3_600_000 * 30_000]) {
      const parsed = parseGrpcTimeout(formatGrpcTimeout(ms)!)!;
      expect(parsed).toBeGreaterThanOrEqual(ms);
    }
  });
});
