import type { IncomingMessage, ServerResponse } from 'node:http';
import { context, defaultTextMapGetter, type Context } from '@opentelemetry/api';
import { getRPCMetadata, RPCType } from '@opentelemetry/core';
import { safeExecuteInTheMiddle } from '@opentelemetry/instrumentation';
import { getDeadline, setDeadline, withoutDeadline } from '../../src/context';
import { DeadlineNode } from '../../src/deadline-node';
import { DeadlineCancelledError } from '../../src/errors';
import { ATTR_DEADLINE_WOULD_ABORT } from '../names';
import { admit, callerGone, isRefusal, type ServerHost } from './admission';
import { restateForwardedMarkers } from './forwarded-marker';
import { writeRejectReply } from './reject';

/** The operation name of the deadline a server request runs under. */
export const SERVER_OPERATION = 'http.server';

type RequestListener = (this: unknown, request: IncomingMessage, response: ServerResponse) => unknown;

/** Marks a request answered with a refusal: no listener runs. */
const REFUSED: unique symbol = Symbol('refused');

/** Per request: the context its listeners run in (undefined: untouched), or REFUSED. */
type Admitted = Context | typeof REFUSED | undefined;

/** Each request is admitted once, however many 'request' listeners its server has. */
const admitted = new WeakMap<IncomingMessage, { state: Admitted }>();

/** The deadline instrumentation-http's global propagator extracted from this very request, if any. */
function extractedHere(ctx: Context): DeadlineNode | undefined {
  if (getRPCMetadata(ctx)?.type !== RPCType.HTTP) return undefined;
  const active = getDeadline(ctx);
  return active instanceof DeadlineNode && active.source === 'remote' ? active : undefined;
}

function admitRequest(host: ServerHost, request: IncomingMessage, response: ServerResponse, ctx: Context): Admitted {
  const { settings } = host;
  const trust = settings.trustIncoming;
  const trusted = trust === undefined || safeExecuteInTheMiddle(() => trust(request), () => {}, true) === true;
  // instrumentation-http puts its server span in the RPC metadata of the context it runs the listeners in.
  const span = getRPCMetadata(ctx)?.span;
  const arrival = { trusted, extracted: extractedHere(ctx), carrier: request.headers, getter: defaultTextMapGetter };
  const deadline = admit(host, arrival, SERVER_OPERATION, span);
  if (isRefusal(deadline)) {
    writeRejectReply(response, settings.rejectStatusCode, deadline);
    return REFUSED;
  }
  // The listeners run: what they send never claims this server refused the request.
  restateForwardedMarkers(response);
  if (deadline === undefined) {
    // Ours is authoritative at the trust edge: drop whatever a global propagator
    // extracted, the baggage entry included (the W3C codec decodes values, such
    // as percent-encoded digits, that our propagator refuses, and the entry
    // would otherwise go on to the next hop as if this edge had accepted it).
    const cleaned = withoutDeadline(ctx);
    return cleaned === ctx ? undefined : cleaned;
  }
  // Ahead of instrumentation-http's own 'close' listener, which ends the server span.
  response.prependListener('close', () => {
    const disconnected = !response.writableFinished;
    if (settings.mode === 'observe') {
      if (disconnected || deadline.expired) span?.setAttribute(ATTR_DEADLINE_WOULD_ABORT, true);
    } else if (disconnected) {
      callerGone(deadline, span, () => new DeadlineCancelledError(SERVER_OPERATION, 'client disconnected'));
    }
    deadline.dispose();
  });
  // Adopted: the context already holds it. Else setDeadline replaces both the context slot and the baggage entry.
  return deadline === getDeadline(ctx) ? undefined : setDeadline(ctx, deadline);
}

/** Admits `request` once, however many 'request' listeners its server has. */
function admissionOf(host: ServerHost, request: IncomingMessage, response: ServerResponse): Admitted {
  let record = admitted.get(request);
  if (record === undefined) {
    record = { state: admitRequest(host, request, response, context.active()) };
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
    const state = admissionOf(host, request, response);
    if (state === REFUSED) return undefined;
    if (state === undefined) return listener.call(this, request, response);
    return context.with(state, listener, this, request, response);
  };
  Object.defineProperty(wrapped, 'listener', { value: listener });
  return wrapped;
}
