import { EventEmitter } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { context, SpanStatusCode, type Context, type Span } from '@opentelemetry/api';
import { getRPCMetadata, RPCType } from '@opentelemetry/core';
import { getDeadline, setDeadline, withoutDeadline } from '../../src/context';
import { DeadlineNode } from '../../src/deadline-node';
import { abortCodeOf, DeadlineCancelledError } from '../../src/errors';
import type { DeadlinePropagator } from '../../src/propagation/DeadlinePropagator';
import {
  ATTR_DEADLINE_ABORT_CODE,
  ATTR_DEADLINE_ABORT_REASON,
  ATTR_DEADLINE_OUTCOME,
} from '../../src/attributes';
import type { ResolvedConfig } from '../config';
import { ATTR_DEADLINE_WOULD_ABORT, ATTR_DEADLINE_WOULD_REJECT } from '../names';
import { incomingBudget, rejectionFor } from './admission';
import { restateForwardedMarkers } from './forwarded-marker';
import { writeRejectReply } from './reject';

export interface ServerHost {
  readonly settings: ResolvedConfig;
  readonly serverPropagator: DeadlinePropagator;
  isEnabled(): boolean;
}

/** The operation name of the deadline a server request runs under. */
export const SERVER_OPERATION = 'http.server';

type RequestListener = (this: unknown, request: IncomingMessage, response: ServerResponse) => unknown;

/** Marks a request that was answered at once: no listener runs. */
const REJECTED: unique symbol = Symbol('rejected request');

/** Per request: the context its listeners run in (undefined: untouched), or REJECTED. */
type Admitted = Context | typeof REJECTED | undefined;

/** Only for servers with more than one 'request' listener, so that each request is admitted once. */
const admitted = new WeakMap<IncomingMessage, { state: Admitted }>();

/** instrumentation-http puts its server span in the RPC metadata of the context it runs the listeners in. */
function serverSpan(ctx: Context): Span | undefined {
  return getRPCMetadata(ctx)?.span;
}

/** The deadline instrumentation-http's global propagator extracted from this very request, if any. */
function extractedHere(ctx: Context): DeadlineNode | undefined {
  if (getRPCMetadata(ctx)?.type !== RPCType.HTTP) return undefined;
  const active = getDeadline(ctx);
  return active instanceof DeadlineNode && active.source === 'remote' ? active : undefined;
}

function admit(host: ServerHost, request: IncomingMessage, response: ServerResponse, ctx: Context): Admitted {
  const { settings } = host;
  const extracted = extractedHere(ctx);
  const budget = incomingBudget(settings, host.serverPropagator, request, extracted);
  if (budget === undefined) {
    restateForwardedMarkers(response);
    // Ours is authoritative at the trust edge: drop whatever a global propagator
    // extracted, the baggage entry included (the W3C codec decodes values, such
    // as percent-encoded digits, that our propagator refuses, and the entry
    // would otherwise go on to the next hop as if this edge had accepted it).
    const cleaned = withoutDeadline(ctx);
    return cleaned === ctx ? undefined : cleaned;
  }

  const span = serverSpan(ctx);
  const observe = settings.mode === 'observe';
  const rejection = rejectionFor(budget, settings.minUsefulMs);
  if (rejection !== undefined) {
    if (observe) {
      span?.setAttribute(ATTR_DEADLINE_WOULD_REJECT, true);
    } else {
      span?.setAttributes({ [ATTR_DEADLINE_OUTCOME]: 'not_started', [ATTR_DEADLINE_ABORT_CODE]: rejection });
      span?.setStatus({ code: SpanStatusCode.ERROR, message: rejection });
      writeRejectReply(response, settings.rejectStatusCode, rejection, settings.minUsefulMs, budget.remainingMs);
      return REJECTED;
    }
  }
  // The listeners run: what they send never claims this server refused the request.
  restateForwardedMarkers(response);

  // The deadline the global propagator built from these headers, unless
  // maxIncomingMs cut it shorter: the context the listeners run in then needs no change.
  const adopted = extracted !== undefined && budget.cutoffMono === extracted.cutoffMono ? extracted.adoptAs(SERVER_OPERATION) : undefined;
  const deadline =
    adopted ??
    new DeadlineNode({
      operation: SERVER_OPERATION,
      cutoffMono: budget.cutoffMono,
      expiresAtMs: budget.expiresAtMs,
      source: budget.source,
      budgetMs: budget.remainingMs,
      wireSkewMs: budget.wireSkewMs,
    });
  // Ahead of instrumentation-http's own 'close' listener, which ends the server
  // span. 'close' is emitted once, so no once-wrapper is needed. Called through
  // the prototype: instrumentation-http binds the response's own listener
  // methods to its context, which costs a wrapper per listener that this one,
  // using nothing from the context, does not need.
  EventEmitter.prototype.prependListener.call(response, 'close', () => {
    const disconnected = !response.writableFinished;
    if (observe) {
      if (disconnected || deadline.expired) span?.setAttribute(ATTR_DEADLINE_WOULD_ABORT, true);
    } else if (disconnected && !deadline.aborted) {
      const reason = new DeadlineCancelledError(SERVER_OPERATION, 'client disconnected');
      deadline.abort(reason);
      span?.setAttributes({
        [ATTR_DEADLINE_OUTCOME]: 'cancelled',
        [ATTR_DEADLINE_ABORT_CODE]: reason.code,
        [ATTR_DEADLINE_ABORT_REASON]: reason.message,
      });
    } else if (disconnected) {
      // Aborted already (its cutoff), then the caller hung up: the span ends now, on the
      // disconnect, when it could. Written before it ends, so the span processor knows the
      // package ended it and does not count a slow disconnect as work going on (stop-rule.ts).
      const code = abortCodeOf(deadline.abortReason);
      span?.setAttributes({ [ATTR_DEADLINE_OUTCOME]: code === 'CANCELLED' ? 'cancelled' : 'expired', [ATTR_DEADLINE_ABORT_CODE]: code });
    }
    deadline.dispose();
  });
  if (adopted !== undefined) return undefined;
  // Replaces both the context slot and the baggage entry a global propagator set.
  return setDeadline(ctx, deadline);
}

/** True when `server` may run listeners other than this one for the same request. */
function mayHaveOtherListeners(server: unknown): boolean {
  const count = (server as { listenerCount?: (event: string) => number } | null | undefined)?.listenerCount;
  return typeof count !== 'function' || count.call(server, 'request') !== 1;
}

/** Admits `request` once, however many 'request' listeners its server has. */
function admissionOf(host: ServerHost, server: unknown, request: IncomingMessage, response: ServerResponse): Admitted {
  // The usual single listener admits directly: no per-request record to keep.
  if (!mayHaveOtherListeners(server)) return admit(host, request, response, context.active());
  let record = admitted.get(request);
  if (record === undefined) {
    record = { state: admit(host, request, response, context.active()) };
    admitted.set(request, record);
  }
  return record.state;
}

/**
 * Wraps a server's 'request' listener so that it runs in a context carrying
 * the request's deadline. Wrapping the listener rather than `Server.emit`
 * puts us inside instrumentation-http whichever registered first: it runs
 * listeners in a context it extracts from ROOT, which would drop ours.
 * `listener` is kept on the wrapper, which is how EventEmitter's
 * removeListener and listeners() find the original.
 */
export function wrapRequestListener(host: ServerHost, listener: RequestListener): RequestListener {
  const wrapped = function (this: unknown, request: IncomingMessage, response: ServerResponse): unknown {
    if (!host.isEnabled()) return listener.call(this, request, response);
    const state = admissionOf(host, this, request, response);
    if (state === REJECTED) return undefined;
    if (state === undefined) return listener.call(this, request, response);
    return context.with(state, listener, this, request, response);
  };
  Object.defineProperty(wrapped, 'listener', { value: listener });
  return wrapped;
}
