/**
 * Writing `grpc-timeout`: pure, no clock, never throws. Reading is the
 * propagator's (`parseGrpcTimeout` in src/propagation/parse.ts), on a server
 * where grpc-js has already consumed the header and only reports the absolute
 * deadline, which SERVER_CALL_GETTER hands back in this form.
 */
/** The protocol allows at most 8 digits per value. */
const MAX_DIGITS_VALUE = 99_999_999;

/** Coarser units, each tried when the value in the finer one needs more than 8 digits. */
const UNITS: readonly (readonly [unit: string, ms: number])[] = [
  ['m', 1],
  ['S', 1000],
  ['M', 60_000],
  ['H', 3_600_000],
];

/**
 * `ms` as a `grpc-timeout` value in the finest unit whose value fits in 8 digits, rounded up as grpc-js
 * does (never shorter than `ms`). Negative, NaN and non-finite input: undefined.
 */
export function formatGrpcTimeout(ms: number): string | undefined {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) return undefined;
  for (const [unit, size] of UNITS) {
    const value = Math.ceil(ms / size);
    if (value <= MAX_DIGITS_VALUE) return `${value}${unit}`;
  }
  // Beyond 99,999,999 hours (about 11,400 years): the largest value the wire can carry.
  return `${MAX_DIGITS_VALUE}H`;
}
