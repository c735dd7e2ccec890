import { SpanStatusCode, type Span, type TextMapGetter } from '@opentelemetry/api';
import { DeadlineNode } from '../../src/deadline';
import { abortCodeOf, describeAbortReason } from '../../src/errors';
import type { DeadlinePropagator } from '../../src/propagation/DeadlinePropagator';
import { monotonicNowForOpening } from '../../src/time';
import { ATTR_DEADLINE_ABORT_CODE, ATTR_DEADLINE_ABORT_REASON, ATTR_DEADLINE_OUTCOME } from '../../src/attributes';
import type { RejectClaim } from '../call/reject-claim';
import type { ResolvedConfig } from '../config';
import { ATTR_DEADLINE_WOULD_REJECT } from '../names';

/**
 * One admission for every server transport (HTTP and gRPC): the incoming
 * budget, admit or refuse, and what the span records. Each transport plugs in
 * how it reads the caller's values and how it writes its refusal.
 */

export interface ServerHost {
  readonly settings: ResolvedConfig;
  readonly serverPropagator: DeadlinePropagator;
  isEnabled(): boolean;
}

/** What one incoming request or call brings to the admission. */
export interface Arrival<Carrier> {
  /** Whether to believe the caller's deadline (`trustIncoming`, `trustIncomingGrpc`). */
  trusted: boolean;
  /** The deadline a global propagator already read from this very request (instrumentation-http's or -grpc's), if any. */
  extracted: DeadlineNode | undefined;
  carrier: Carrier;
  getter: TextMapGetter<Carrier>;
}

interface IncomingBudget {
  remainingMs: number;
  cutoffMono: number;
  expiresAtMs: number;
  wireSkewMs: number | undefined;
}

/** Marks a request answered with a refusal: no handler runs. */
export const REFUSED: unique symbol = Symbol('refused');

/**
 * A budget of `ms` from now. The wall clock is read before the monotonic one,
 * so a pause between the two reads can only make the cutoff sent downstream
 * (expiresAtMs) earlier than the one enforced here, never later.
 */
function fromNow(ms: number, wireSkewMs: number | undefined): IncomingBudget {
  const expiresAtMs = Date.now() + ms;
  return { remainingMs: ms, cutoffMono: monotonicNowForOpening() + ms, expiresAtMs, wireSkewMs };
}

/**
 * The caller's budget if the caller is trusted (capped at `maxIncomingMs`):
 * the extracted deadline's own cutoff when there is one (a relative header
 * read again a moment later would end a moment later), else the wire values.
 * Failing those, `defaultTimeoutMs` (a deadline of this server's own), else none.
 */
function budgetOf<Carrier>(settings: ResolvedConfig, propagator: DeadlinePropagator, arrival: Arrival<Carrier>): { budget: IncomingBudget; remote: boolean } | undefined {
  const { trusted, extracted } = arrival;
  if (trusted && extracted !== undefined) {
    const remainingMs = extracted.remainingMs();
    const max = settings.maxIncomingMs;
    if (max !== undefined && remainingMs > max) return { budget: fromNow(max, extracted.wireSkewMs), remote: true };
    return { budget: { remainingMs, cutoffMono: extracted.cutoffMono, expiresAtMs: extracted.expiresAtMs, wireSkewMs: extracted.wireSkewMs }, remote: true };
  }
  const wire = trusted ? propagator.read(arrival.carrier, arrival.getter) : undefined;
  if (wire !== undefined) {
    return { budget: { ...wire, cutoffMono: monotonicNowForOpening() + wire.remainingMs }, remote: true };
  }
  return settings.defaultTimeoutMs === undefined ? undefined : { budget: fromNow(settings.defaultTimeoutMs, undefined), remote: false };
}

/**
 * Admits one incoming request: undefined when it carries no deadline of ours
 * (the handler runs as it is); REFUSED, in enforce mode, when it arrived with
 * its deadline passed or less than `minUsefulMs` left, after `refuse` wrote the
 * transport's refusal; else the deadline its handler runs under: the extracted
 * one itself, renamed, when `maxIncomingMs` left it whole.
 */
export function admit<Carrier>(
  host: ServerHost,
  arrival: Arrival<Carrier>,
  operation: string,
  span: () => Span | undefined,
  refuse: (claim: RejectClaim) => void,
): DeadlineNode | typeof REFUSED | undefined {
  const { settings } = host;
  const found = budgetOf(settings, host.serverPropagator, arrival);
  if (found === undefined) return undefined;
  const { budget } = found;
  const code = budget.remainingMs <= 0 ? 'DEADLINE_EXCEEDED' : budget.remainingMs < settings.minUsefulMs ? 'INSUFFICIENT_BUDGET' : undefined;
  if (code !== undefined && settings.mode === 'observe') {
    span()?.setAttribute(ATTR_DEADLINE_WOULD_REJECT, true);
  } else if (code !== undefined) {
    const spanNow = span();
    spanNow?.setAttributes({ [ATTR_DEADLINE_OUTCOME]: 'not_started', [ATTR_DEADLINE_ABORT_CODE]: code });
    spanNow?.setStatus({ code: SpanStatusCode.ERROR, message: code });
    refuse(code === 'DEADLINE_EXCEEDED' ? { code } : { code, neededMs: settings.minUsefulMs, remainingMs: budget.remainingMs });
    return REFUSED;
  }
  const { extracted } = arrival;
  if (extracted !== undefined && budget.cutoffMono === extracted.cutoffMono) return extracted.adoptAs(operation);
  return new DeadlineNode({
    operation,
    cutoffMono: budget.cutoffMono,
    expiresAtMs: budget.expiresAtMs,
    source: found.remote ? 'remote' : 'local',
    budgetMs: budget.remainingMs,
    wireSkewMs: budget.wireSkewMs,
  });
}

/**
 * The caller went away before the answer (disconnected, cancelled): the
 * deadline aborts with `reason()` unless it already had (reading `aborted`
 * past the cutoff aborts it as expired), and the span says how the request
 * ended, before it ends, so the span processor knows the package ended it.
 */
export function callerGone(deadline: DeadlineNode, span: Span | undefined, reason: () => Error): void {
  if (!deadline.aborted) deadline.abort(reason());
  const why = deadline.abortReason;
  const code = abortCodeOf(why);
  span?.setAttributes({
    [ATTR_DEADLINE_OUTCOME]: code === 'CANCELLED' ? 'cancelled' : 'expired',
    [ATTR_DEADLINE_ABORT_CODE]: code,
    [ATTR_DEADLINE_ABORT_REASON]: describeAbortReason(why),
  });
}
