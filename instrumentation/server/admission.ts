import { SpanStatusCode, type Span, type TextMapGetter } from '@opentelemetry/api';
import type { DeadlineSource } from '../../src/deadline';
import { DeadlineNode, type NodeInit } from '../../src/deadline-node';
import { abortCodeOf, describeAbortReason } from '../../src/errors';
import type { DeadlinePropagator } from '../../src/propagation/DeadlinePropagator';
import { monotonicNow } from '../../src/time';
import { ATTR_DEADLINE_ABORT_CODE, ATTR_DEADLINE_ABORT_REASON, ATTR_DEADLINE_OUTCOME } from '../../src/attributes';
import type { RejectClaim } from '../call/reject-claim';
import type { ResolvedConfig } from '../config';
import { ATTR_DEADLINE_WOULD_REJECT } from '../names';

/**
 * One admission for every server transport (HTTP and gRPC): the incoming budget, admit or refuse, and what
 * the span records. Each transport plugs in how it reads the caller's values and how it writes its refusal.
 */

export interface ServerHost {
  readonly settings: ResolvedConfig;
  readonly serverPropagator: DeadlinePropagator;
  isEnabled(): boolean;
}

/**
 * One incoming request or call: whether to believe the caller (`trustIncoming`, `trustIncomingGrpc`), the
 * deadline a global propagator already read from it (instrumentation-http's or -grpc's), and its headers.
 */
export interface Arrival<Carrier> {
  trusted: boolean;
  extracted: DeadlineNode | undefined;
  carrier: Carrier;
  getter: TextMapGetter<Carrier>;
}

type Budget = Omit<NodeInit, 'operation'>;

/**
 * A budget of `ms` from now. The wall clock first: a pause between the two reads can only make the cutoff
 * sent downstream (expiresAtMs) earlier than the one enforced here, never later.
 */
function fromNow(ms: number, source: DeadlineSource, wireSkewMs: number | undefined): Budget {
  const expiresAtMs = Date.now() + ms;
  return { budgetMs: ms, cutoffMono: monotonicNow() + ms, expiresAtMs, source, wireSkewMs };
}

/**
 * The caller's budget if the caller is trusted (capped at `maxIncomingMs`):
 * the extracted deadline itself when there is one and the cap leaves it whole
 * (a relative header read again a moment later would end a moment later), else
 * the wire values. Failing those, `defaultTimeoutMs` (a deadline of this server's own), else none.
 */
function budgetOf<Carrier>(settings: ResolvedConfig, propagator: DeadlinePropagator, arrival: Arrival<Carrier>): DeadlineNode | Budget | undefined {
  const { trusted, extracted } = arrival;
  if (trusted && extracted !== undefined) {
    const max = settings.maxIncomingMs;
    return max !== undefined && extracted.remainingMs() > max ? fromNow(max, 'remote', extracted.wireSkewMs) : extracted;
  }
  const wire = trusted ? propagator.read(arrival.carrier, arrival.getter) : undefined;
  if (wire !== undefined) {
    const { remainingMs, expiresAtMs, wireSkewMs } = wire;
    return { budgetMs: remainingMs, cutoffMono: monotonicNow() + remainingMs, expiresAtMs, source: 'remote', wireSkewMs };
  }
  return settings.defaultTimeoutMs === undefined ? undefined : fromNow(settings.defaultTimeoutMs, 'local', undefined);
}

/** True when admit refused: the transport writes the refusal, and no handler runs. */
export function isRefusal(admission: DeadlineNode | RejectClaim | undefined): admission is RejectClaim {
  return admission !== undefined && !(admission instanceof DeadlineNode);
}

/**
 * Admits one incoming request: undefined when it carries no deadline of ours
 * (the handler runs as it is); in enforce mode, the refusal for the transport
 * to write (isRefusal) when it arrived with its deadline passed or less than
 * `minUsefulMs` left; else the deadline its handler runs under: the extracted
 * one itself, renamed, when `maxIncomingMs` left it whole. `span`, or what it
 * makes, records the verdict.
 */
export function admit<Carrier>(
  host: ServerHost,
  arrival: Arrival<Carrier>,
  operation: string,
  span: Span | (() => Span) | undefined,
): DeadlineNode | RejectClaim | undefined {
  const { settings } = host;
  const budget = budgetOf(settings, host.serverPropagator, arrival);
  if (budget === undefined) return undefined;
  const left = budget instanceof DeadlineNode ? budget.remainingMs() : budget.budgetMs;
  const code = left <= 0 ? 'DEADLINE_EXCEEDED' : left < settings.minUsefulMs ? 'INSUFFICIENT_BUDGET' : undefined;
  if (code !== undefined) {
    const recorder = typeof span === 'function' ? span() : span;
    if (settings.mode === 'observe') {
      recorder?.setAttribute(ATTR_DEADLINE_WOULD_REJECT, true);
    } else {
      recorder?.setAttributes({ [ATTR_DEADLINE_OUTCOME]: 'not_started', [ATTR_DEADLINE_ABORT_CODE]: code });
      recorder?.setStatus({ code: SpanStatusCode.ERROR, message: code });
      return code === 'DEADLINE_EXCEEDED' ? { code } : { code, neededMs: settings.minUsefulMs, remainingMs: left };
    }
  }
  return budget instanceof DeadlineNode ? budget.adoptAs(operation) : new DeadlineNode({ operation, ...budget });
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
