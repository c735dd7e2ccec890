import { parseArgs } from 'node:util';
import { INSTRUMENTATION_VERSION } from '../../instrumentation/names';
import { REMOTE_GRACE_MS } from './remote';

export interface CliOptions {
  source: string;
  trace?: string;
  html?: string;
  failOnViolation: boolean;
  timeoutMs: number;
  /** Search mode: the service whose spans are searched. */
  service?: string;
  lookbackMs: number;
  limit: number;
  /** The allowance for lateness across processes, in ms. */
  graceMs: number;
}

export type ParsedArgs =
  | { help: true }
  | { help: false; version: string }
  | { help: false; version?: undefined; options: CliOptions };

/** A trace id as OpenTelemetry writes it, 32 hex digits (either case), or a 64-bit Jaeger id of 16. */
const TRACE_ID = /^([0-9a-f]{16}){1,2}$/i;

/** A usage mistake: printed with a pointer to --help, exit 2. */
export class UsageError extends Error {
  override name = 'UsageError';
}

export const DEFAULT_TIMEOUT_MS = 10_000;
export const DEFAULT_LOOKBACK = '1h';
/** Jaeger's UI asks for 20 traces by default; the same keeps a search quick to read. */
export const DEFAULT_LIMIT = 20;

export const HELP = `Usage: deadline-lineage [options] <source>

Show how one request deadline flowed through a trace: a span tree with each hop's cutoff,
remaining budget and outcome, lateness violations marked, and a summary.

Arguments:
  source                 a Jaeger API JSON file, an OTLP/JSON file (collector file exporter, JSON lines),
                         or a Jaeger query URL such as http://localhost:16686 (with --trace or --service)

Options:
  -t, --trace <id>       show only this trace (with a Jaeger URL: fetch it)
  -s, --service <name>   with a Jaeger URL: search that service's spans for lateness
  --lookback <time>      how far back a search looks, e.g. 30m, 1h, 2d (default: ${DEFAULT_LOOKBACK})
  --limit <n>            at most this many traces per search query (default: ${DEFAULT_LIMIT})
  --html <file>          also write a self-contained timeline page to <file>
  --grace <ms>           allowance for lateness across processes: a callee may go on this long after its
                         caller ended, for clock skew and its stop path (default: ${REMOTE_GRACE_MS})
  --fail-on-violation    exit 1 when any span is flagged late (a CI gate)
  --timeout <ms>         how long to wait for Jaeger (default: ${DEFAULT_TIMEOUT_MS})
  -V, --version          print the version
  -h, --help             display help for command

Exit codes: 0 done, 1 violation found (with --fail-on-violation), 2 bad input.
`;

/** A flag's whole number: positive, or (with `digits`, for --grace) zero allowed and at most that many digits. */
function wholeNumber(flag: string, value: string | undefined, fallback: number, what: string, digits?: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  const shape = digits === undefined ? /^\d+$/ : new RegExp(`^\\d{1,${digits}}$`);
  if (!shape.test(value.trim()) || !Number.isSafeInteger(n) || (digits === undefined && n <= 0)) {
    throw new UsageError(`option '${flag}' argument '${value}' is invalid. expected ${what}`);
  }
  return n;
}

export const UNIT_MS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `90s`, `30m`, `1h`, `2d`: Jaeger UI's lookback spellings. */
export function parseDuration(value: string): number | undefined {
  const match = /^(\d+)([smhd])$/.exec(value.trim());
  if (match === null) return undefined;
  const ms = Number(match[1]) * UNIT_MS[match[2]];
  return ms > 0 && Number.isSafeInteger(ms) ? ms : undefined;
}

/** Turns parseArgs' own errors (unknown option, missing value) into one plain sentence. */
function describeParseError(err: Error): string {
  // Its messages carry a long hint about '--' after the first sentence; the first is what matters.
  return err.message.split('. To specify')[0].replace(/^Option/, 'option').replace(/^Unknown option/, 'unknown option');
}

export function parseCliArgs(argv: string[]): ParsedArgs {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        trace: { type: 'string', short: 't' },
        service: { type: 'string', short: 's' },
        lookback: { type: 'string' },
        limit: { type: 'string' },
        html: { type: 'string' },
        'fail-on-violation': { type: 'boolean' },
        timeout: { type: 'string' },
        grace: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
        version: { type: 'boolean', short: 'V' },
      },
    });
  } catch (err) {
    throw new UsageError(describeParseError(err as Error));
  }
  const { values, positionals } = parsed;
  if (values.help === true) return { help: true };
  // The package's own version, through its self-reference (see instrumentation/names.ts).
  if (values.version === true) return { help: false, version: INSTRUMENTATION_VERSION };
  if (positionals.length === 0) throw new UsageError("missing required argument 'source'");
  if (positionals.length > 1) {
    throw new UsageError(`too many arguments: expected 1 source but got ${positionals.length}`);
  }
  const lookback = values.lookback ?? DEFAULT_LOOKBACK;
  const lookbackMs = parseDuration(lookback);
  if (lookbackMs === undefined) {
    throw new UsageError(`option '--lookback <time>' argument '${lookback}' is invalid. expected a number with s, m, h or d, as in 1h`);
  }
  const options: CliOptions = {
    source: positionals[0],
    trace: values.trace,
    html: values.html,
    service: values.service,
    failOnViolation: values['fail-on-violation'] === true,
    timeoutMs: wholeNumber('--timeout <ms>', values.timeout, DEFAULT_TIMEOUT_MS, 'a positive whole number of ms'),
    lookbackMs,
    limit: wholeNumber('--limit <n>', values.limit, DEFAULT_LIMIT, 'a positive whole number'),
    graceMs: wholeNumber('--grace <ms>', values.grace, REMOTE_GRACE_MS, 'a whole number of ms', 9),
  };
  if (options.service !== undefined && options.trace !== undefined) {
    throw new UsageError('give either --trace (one trace) or --service (a search), not both');
  }
  if (options.trace !== undefined && !TRACE_ID.test(options.trace)) {
    throw new UsageError(`option '--trace <id>' argument '${options.trace.slice(0, 64)}' is invalid. expected a trace id of 32 hex digits (or Jaeger's 16)`);
  }
  return { help: false, options };
}
