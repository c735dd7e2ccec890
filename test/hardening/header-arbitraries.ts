/**
 * fast-check generators for hostile deadline carriers: every header extract
 * accepts, with valid, malformed, huge, multi-valued and unicode values.
 *
 * Kept cheap on purpose (a property runs 100,000 times): rich texts and
 * huge values come from pools built once, and a run picks from them by index.
 */
import fc from 'fast-check';
import { DeadlineHeaders } from '../../src';

const {
  BAGGAGE_KEY: BAGGAGE_DEADLINE_KEY,
  AT_MS: HEADER_AT_MS,
  BAGGAGE: HEADER_BAGGAGE,
  CONNECT_TIMEOUT_MS: HEADER_CONNECT_TIMEOUT_MS,
  GRPC_TIMEOUT: HEADER_GRPC_TIMEOUT,
  REMAINING_MS: HEADER_REMAINING_MS,
  RUN_DEADLINE_MS: HEADER_RUN_DEADLINE_MS,
} = DeadlineHeaders;

export const INTEGER_HEADERS = [HEADER_REMAINING_MS, HEADER_AT_MS, HEADER_CONNECT_TIMEOUT_MS, HEADER_RUN_DEADLINE_MS];
export const ACCEPTED_HEADERS = [...INTEGER_HEADERS, HEADER_GRPC_TIMEOUT, HEADER_BAGGAGE];

const KiB = 1024;
const MiB = 1024 * KiB;

/** Strings at and around every length limit in parse.ts, plus far past them. */
const HUGE_VALUES: readonly string[] = [
  '1'.repeat(15),
  '1'.repeat(16),
  '9'.repeat(1023),
  '1,'.repeat(511) + '1',
  '5'.repeat(1025),
  ' ,'.repeat(600),
  `${BAGGAGE_DEADLINE_KEY}=1,`.repeat(460),
  `${BAGGAGE_DEADLINE_KEY}=1;p,`.repeat(600).slice(0, 8192),
  `${BAGGAGE_DEADLINE_KEY}=1;p,`.repeat(600).slice(0, 8193),
  'x'.repeat(64 * KiB),
  '7'.repeat(MiB),
  `${BAGGAGE_DEADLINE_KEY}=0,`.repeat(MiB / 16),
];

/** Texts that look numeric to a lax parser but are not plain ASCII integers. */
const TRICKY_NUMBERS = [
  '', ' ', ',', ',,,', '+5', '-5', '-0', '0x10', '0b101', '0o7', '1e3', '1E3', '1.5', '.5', '5.', '1_000',
  'NaN', 'Infinity', '-Infinity', '9007199254740993', '999999999999999', '1000000000000000',
  '１２３', '٣٠٠', '๕', '5\u0000', '\t7\t', '5\r\nx-evil: 1', '½', '²', '\u200b5', '5\u00a0', '0'.repeat(15),
];

const GRPC_UNITS = ['H', 'M', 'S', 'm', 'u', 'n', 'h', 's', 'ms', 'us', 'x', '', ' S', 'S '];

const digitText = (maxLength: number) =>
  fc.string({ unit: fc.constantFrom(...'0123456789'), minLength: 1, maxLength });

/** Anything that could arrive where an integer of milliseconds is expected. */
export const integerText: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.nat().map(String), weight: 3 },
  { arbitrary: digitText(22), weight: 2 },
  { arbitrary: fc.bigInt({ min: 0n, max: 10n ** 25n }).map(String), weight: 1 },
  { arbitrary: fc.integer({ min: -2_000_000_000, max: -1 }).map(String), weight: 1 },
  { arbitrary: fc.double().map(String), weight: 1 },
  { arbitrary: fc.constantFrom(...TRICKY_NUMBERS), weight: 2 },
  // Epoch values around now, so the absolute headers also produce usable cutoffs.
  { arbitrary: fc.integer({ min: -120_000, max: 3_600_000 }).map((d) => String(Date.now() + d)), weight: 3 },
);

export const grpcText: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.tuple(digitText(10), fc.constantFrom(...GRPC_UNITS)).map(([n, u]) => n + u), weight: 4 },
  { arbitrary: integerText, weight: 1 },
);

const baggageKey = fc.oneof(
  fc.constantFrom(
    BAGGAGE_DEADLINE_KEY,
    ` ${BAGGAGE_DEADLINE_KEY} `,
    'Deadline.At_Ms',
    `${BAGGAGE_DEADLINE_KEY}2`,
    'deadline%2Eat_ms',
    'userId',
  ),
  fc.string({ maxLength: 12 }),
);
const baggageMember = fc.oneof(
  {
    arbitrary: fc
      .tuple(baggageKey, integerText, fc.constantFrom('', ';prop', ';a=b;c', ';', ';;=;', '=x'))
      .map(([k, v, p]) => `${k}=${v}${p}`),
    weight: 4,
  },
  { arbitrary: fc.string({ maxLength: 16 }), weight: 1 },
);
export const baggageText: fc.Arbitrary<string> = fc
  .tuple(fc.array(baggageMember, { maxLength: 8 }), fc.constantFrom(',', ', ', ' ,', ',,'))
  .map(([members, sep]) => members.join(sep));

function textFor(header: string): fc.Arbitrary<string> {
  if (header === HEADER_BAGGAGE) return baggageText;
  if (header === HEADER_GRPC_TIMEOUT) return grpcText;
  return integerText;
}

/** Values a hand-built carrier may hold that are not strings at all. */
const NOT_A_STRING: readonly unknown[] = [
  null,
  undefined,
  42,
  -1,
  NaN,
  Infinity,
  true,
  {},
  [],
  [[]],
  Symbol('x'),
  10n,
  {
    toString() {
      throw new Error('hostile toString');
    },
  },
];

/**
 * Ready-made header texts, drawn once from the rich generators above. Drawing
 * a rich string costs fast-check ~50-250 µs; picking one by index costs ~1 µs,
 * which is what lets a property run 100,000 times in seconds. The pool is
 * drawn from `seed`, so a failing seed reproduces the same pool.
 */
export interface ValuePool {
  texts: Record<string, readonly string[]>;
}

export function drawValuePool(seed: number, perHeader = 1_500): ValuePool {
  const texts: Record<string, readonly string[]> = {};
  ACCEPTED_HEADERS.forEach((header, i) => {
    const sampled = fc.sample(
      fc.oneof({ arbitrary: textFor(header), weight: 5 }, { arbitrary: fc.string({ unit: 'binary', maxLength: 24 }), weight: 1 }),
      { seed: seed + i, numRuns: perHeader },
    );
    texts[header] = [...sampled, ...TRICKY_NUMBERS];
  });
  return { texts };
}

const pick = <T>(values: readonly T[]): fc.Arbitrary<T> => fc.nat({ max: values.length - 1 }).map((i) => values[i]);

/**
 * One header's value: single, comma-joined, repeated as an array, huge, or not
 * a string. Huge values are never joined (that would copy a MiB per run).
 */
function headerValue(header: string, pool: ValuePool): fc.Arbitrary<unknown> {
  const text = pick(pool.texts[header]);
  const huge = pick(HUGE_VALUES);
  const other = pick(NOT_A_STRING);
  return fc.oneof(
    { arbitrary: text, weight: 6 },
    { arbitrary: huge, weight: 1 },
    { arbitrary: fc.array(text, { minLength: 2, maxLength: 6 }).map((parts) => parts.join(',')), weight: 2 },
    // Node gives repeated headers as arrays; more than parse.ts reads (32) on purpose.
    { arbitrary: fc.array(fc.oneof({ arbitrary: text, weight: 4 }, huge, other), { maxLength: 40 }), weight: 2 },
    { arbitrary: other, weight: 1 },
  );
}

/** A plain carrier with any subset of the accepted headers. */
export function hostileCarrier(pool: ValuePool): fc.Arbitrary<Record<string, unknown>> {
  return fc.record(Object.fromEntries(ACCEPTED_HEADERS.map((h) => [h, headerValue(h, pool)])), { requiredKeys: [] });
}
