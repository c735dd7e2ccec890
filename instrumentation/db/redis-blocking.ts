/**
 * Where each blocking Redis command keeps its timeout, and in which unit.
 * `last`: the last argument; `first`: the first; `block`: after the BLOCK
 * keyword (XREAD, XREADGROUP; no BLOCK means no blocking).
 */
const BLOCKING: Record<string, { at: 'last' | 'first' | 'block'; unit: 's' | 'ms' }> = {
  blpop: { at: 'last', unit: 's' },
  brpop: { at: 'last', unit: 's' },
  blmove: { at: 'last', unit: 's' },
  brpoplpush: { at: 'last', unit: 's' },
  blmpop: { at: 'first', unit: 's' },
  bzpopmin: { at: 'last', unit: 's' },
  bzpopmax: { at: 'last', unit: 's' },
  bzmpop: { at: 'first', unit: 's' },
  xread: { at: 'block', unit: 'ms' },
  xreadgroup: { at: 'block', unit: 'ms' },
  wait: { at: 'last', unit: 'ms' },
};

/** One bit per first letter of the names above (bit 0: a), so most commands skip the table: see mayBeBlocking. */
const FIRST_LETTERS = Object.keys(BLOCKING).reduce((mask, name) => mask | (1 << (name.charCodeAt(0) - 0x61)), 0);

/**
 * False only when `name`, in any case, cannot be a blocking command: its first
 * letter starts none of their names (GET, SET, HGET...). A quick look for the
 * hot path before the lower-cased name and the table are consulted. It may
 * say true for names that are not blocking (shift counts wrap), never false
 * for one that is.
 */
export function mayBeBlocking(name: unknown): boolean {
  if (typeof name !== 'string' || name.length === 0) return true;
  return ((FIRST_LETTERS >>> ((name.charCodeAt(0) | 0x20) - 0x61)) & 1) === 1;
}

/** Whether `name` (lower case) is a blocking command whose timeout is clamped. */
export function isBlocking(name: string): boolean {
  return Object.prototype.hasOwnProperty.call(BLOCKING, name);
}

/**
 * Clamps a blocking command's timeout argument, in place, to `remainingMs`:
 * 0 (block forever) and anything longer become the time left, so the server
 * itself answers at the cutoff. Seconds are written with millisecond
 * precision (Redis 6 accepts fractional timeouts); at least 1 ms, since 0
 * would mean forever. Unparseable arguments are left alone.
 */
export function clampBlockingTimeout(name: string, args: unknown[], remainingMs: number): void {
  const spec = isBlocking(name) ? BLOCKING[name] : undefined;
  if (spec === undefined || args.length === 0) return;
  let index = spec.at === 'last' ? args.length - 1 : 0;
  if (spec.at === 'block') {
    index = args.findIndex((arg) => String(arg).toUpperCase() === 'BLOCK') + 1;
    if (index <= 0 || index >= args.length) return;
  }
  const given = Number(String(args[index]));
  if (!Number.isFinite(given) || given < 0) return;
  const givenMs = spec.unit === 's' ? given * 1000 : given;
  const budgetMs = Math.max(1, Math.floor(remainingMs));
  if (givenMs !== 0 && givenMs <= budgetMs) return;
  args[index] = spec.unit === 's' ? (budgetMs / 1000).toFixed(3) : String(budgetMs);
}
