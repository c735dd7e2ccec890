/** Blocking Redis commands: each one's timeout found by its grammar, never by searching the arguments, and clamped. */

/** The timeout's unit: BLPOP and friends take seconds (fractions allowed since Redis 6), XREAD BLOCK and WAIT milliseconds. */
type Unit = 's' | 'ms';

/** The index of the timeout argument in `args`, or -1: the command does not block, or its arguments do not parse (the server refuses those). */
type TimeoutAt = (args: readonly unknown[]) => number;

/** `… timeout`: the last argument, after at least `before` others (`BLPOP key [key …] timeout`). */
const last =
  (before: number): TimeoutAt =>
  (args) =>
    args.length > before ? args.length - 1 : -1;

/** A fixed position in an argument list of exactly `length` (`BLMOVE src dst LEFT|RIGHT LEFT|RIGHT timeout`). */
const fixed =
  (index: number, length: number): TimeoutAt =>
  (args) =>
    args.length === length ? index : -1;

/** `timeout numkeys key [key …] …` (BLMPOP, BZMPOP): the first, when `numkeys` keys follow. */
const firstWithNumkeys: TimeoutAt = (args) => {
  const numkeys = Number(word(args[1]));
  return Number.isInteger(numkeys) && numkeys > 0 && args.length >= 2 + numkeys + 1 ? 0 : -1;
};

/** XREAD / XREADGROUP options before STREAMS, in any order, each with its number of operands; keys and IDs are never read. */
const streamOptions =
  (options: Readonly<Record<string, number>>): TimeoutAt =>
  (args) => {
    let block = -1;
    for (let i = 0; i < args.length; ) {
      const option = word(args[i]).toUpperCase();
      if (option === 'STREAMS') return block;
      const operands = Object.prototype.hasOwnProperty.call(options, option) ? options[option]! : -1;
      if (operands < 0 || i + operands >= args.length) return -1;
      if (option === 'BLOCK') block = i + 1;
      i += 1 + operands;
    }
    return -1; // no STREAMS: the server answers a syntax error
  };

interface BlockingGrammar {
  readonly timeoutAt: TimeoutAt;
  readonly unit: Unit;
}

/** Every blocking command whose timeout is clamped, with its grammar (redis.io/commands). */
const GRAMMARS: Readonly<Record<string, BlockingGrammar>> = {
  blpop: { timeoutAt: last(1), unit: 's' },
  brpop: { timeoutAt: last(1), unit: 's' },
  bzpopmin: { timeoutAt: last(1), unit: 's' },
  bzpopmax: { timeoutAt: last(1), unit: 's' },
  blmove: { timeoutAt: fixed(4, 5), unit: 's' },
  brpoplpush: { timeoutAt: fixed(2, 3), unit: 's' },
  blmpop: { timeoutAt: firstWithNumkeys, unit: 's' },
  bzmpop: { timeoutAt: firstWithNumkeys, unit: 's' },
  xread: { timeoutAt: streamOptions({ COUNT: 1, BLOCK: 1 }), unit: 'ms' },
  xreadgroup: { timeoutAt: streamOptions({ GROUP: 2, COUNT: 1, BLOCK: 1, NOACK: 0 }), unit: 'ms' },
  wait: { timeoutAt: fixed(1, 2), unit: 'ms' },
  waitaof: { timeoutAt: fixed(2, 3), unit: 'ms' },
};

/** An argument as the server reads it: strings, numbers and Buffers; anything else reads as no word. */
function word(arg: unknown): string {
  if (typeof arg === 'string') return arg;
  if (typeof arg === 'number') return String(arg);
  if (arg instanceof Uint8Array) return Buffer.from(arg.buffer, arg.byteOffset, arg.byteLength).toString('latin1');
  return '';
}

export function isBlocking(name: string): boolean {
  return Object.prototype.hasOwnProperty.call(GRAMMARS, name);
}

export function blockingTimeoutIndex(name: string, args: readonly unknown[]): number {
  return isBlocking(name) ? GRAMMARS[name]!.timeoutAt(args) : -1;
}

/** Clamps a blocking command's timeout in place to `remainingMs` (at least 1 ms); true when it now blocks no longer than that. */
export function clampBlockingTimeout(name: string, args: unknown[], remainingMs: number): boolean {
  const index = blockingTimeoutIndex(name, args);
  if (index < 0) return false;
  const unit = GRAMMARS[name]!.unit;
  const text = word(args[index]).trim();
  const given = text === '' ? NaN : Number(text);
  if (!Number.isFinite(given) || given < 0) return false;
  const givenMs = unit === 's' ? given * 1000 : given;
  const budgetMs = Math.max(1, Math.floor(remainingMs));
  if (givenMs !== 0 && givenMs <= budgetMs) return true;
  args[index] = unit === 's' ? (budgetMs / 1000).toFixed(3) : String(budgetMs);
  return true;
}
